"""`spawn`: SQLAlchemy's `greenlet_spawn` on greenlets that are kept and used again.

A request's statements run in a greenlet so that synchronous code (`Direct`, a session) can
await the asyncio driver (`await_`). SQLAlchemy's `greenlet_spawn` makes a new greenlet each
time, and a new greenlet is a new Python frame stack: a 16 KiB `mmap` on its first frame and a
`munmap` when it ends (strace: 1.6 of each per fee charge on PostgreSQL, which makes 3 or 4
hand-overs), about 9 µs a hand-over where switching to a live greenlet costs 1 to 2 µs
(decision 0032). Here a greenlet that has finished its function waits for the next one, on
its thread, instead of ending.

The same contract as `greenlet_spawn`: `fn(*args)` runs at once in the greenlet, in the calling
task's context (contextvars); every `await_` in it hands its awaitable to the caller, which
awaits it and switches back with the outcome (an exception is thrown in, as a cancellation
is); the function's value is returned or its exception raised.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar, cast

from sqlalchemy.util.concurrency import _concurrency_shim

# The greenlet library as SQLAlchemy loads it (its `asyncio` extra installs it): the same
# greenlets `await_` hands over from.
getcurrent = _concurrency_shim.getcurrent
GreenletExit: type[BaseException] = _concurrency_shim.greenlet.GreenletExit

T = TypeVar("T")

# Kept per thread: a greenlet is switched to only on the thread that made it.
_KEEP_AT_MOST = 64
_kept = threading.local()


class _Returned:
    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


class _Raised:
    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


def _serve(fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    """A kept greenlet's life: each function given, then its outcome back to the caller."""
    while True:
        outcome: _Returned | _Raised
        try:
            outcome = _Returned(fn(*args))
        except GreenletExit:
            raise  # the greenlet itself is ending (nobody holds it any more)
        except BaseException as error:  # the caller raises it
            outcome = _Raised(error)
        fn = args = None  # type: ignore[assignment]  # held by nothing while it waits
        fn, args = getcurrent().parent.switch(outcome)


def _free() -> list[Any]:
    try:
        return cast(list[Any], _kept.free)
    except AttributeError:
        free: list[Any] = []
        _kept.free = free
        return free


async def spawn(fn: Callable[..., T], *args: Any) -> T:
    """`greenlet_spawn(fn, *args)` on a kept greenlet (see the module's text)."""
    current = getcurrent()
    free = _free()
    worker = free.pop() if free else None
    if worker is None or worker.parent is not current:
        worker = _concurrency_shim._AsyncIoGreenlet(_serve, current)
    worker.gr_context = current.gr_context
    result = worker.switch(fn, args)
    while True:
        kind = type(result)
        if kind is _Returned or kind is _Raised:
            if len(free) < _KEEP_AT_MOST:
                free.append(worker)
            if kind is _Raised:
                error, result = result.error, None
                raise error
            return cast(T, result.value)
        try:
            value = await result
        except BaseException:
            result = worker.throw(*sys.exc_info())
        else:
            result = worker.switch(value)
