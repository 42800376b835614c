"""What a request's credentials resolve to, remembered for half a second (decision 0013).

Every authenticated call used to read the api-key's programme and the token's session and write
the session's renewal: three statements before the work itself. Here a process keeps, for at most
`FRESH_MS`, the programme of each api-key and the session of each token. So:

- a change made in this process (a key revoked, a logout, a step-up, a clock advance) is seen at
  once: every flush or bulk statement touching a programme, an api-key or a session drops what
  is remembered of them, and again when it commits;
- a change made in another process is seen within `FRESH_MS` (the interface allows 1 second);
- a refusal is never decided on remembered data: what would be refused is read again first.

Entries are frozen snapshots (detached ORM rows), shared read-only by concurrent requests.

An entry goes stale for every request in flight at once: each of them used to read it again
(with 16 clients, 16 statements twice a second, each waiting for a connection). `load_once` lets
the first read and the others wait for its row (decision 0022).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import event
from sqlalchemy.orm import ORMExecuteState, Session, UOWTransaction

from multibank.container import Container
from multibank.kernel.tokens import AuthSession
from multibank.programmes.models import ApiKey, Programme

FRESH_MS = 500.0
MAX_ENTRIES = 50_000  # a bound on memory: past it everything is forgotten and read again

T = TypeVar("T")
_FAILED = object()  # what a failed or cancelled load hands its waiters: each loads for itself


def _monotonic_ms() -> float:
    return time.monotonic() * 1000


@dataclass
class SessionEntry:
    row: AuthSession
    seen_at: float  # monotonic ms of the read
    last_seen_ms: int  # the renewal the database holds (or this process last wrote)


class AuthCache:
    def __init__(self) -> None:
        self.programmes: dict[str, tuple[float, Programme]] = {}
        self.sessions: dict[int, SessionEntry] = {}
        # Loads running now, by ("programme", key hash) or ("session", id).
        self._loading: dict[Hashable, asyncio.Future[Any]] = {}

    async def load_once(self, key: Hashable, load: Callable[[], Awaitable[T]]) -> T:
        """`load()`, unless a load of `key` is running already: then its result.

        The result is a fresh read (it began at most one statement ago), so a refusal decided
        on it is decided on what the database holds, as one read of this request's own would
        be. A load that fails, or whose request is cancelled, hands its waiters nothing: each
        then loads for itself. A waiter cancelled does not cancel the load."""
        running = self._loading.get(key)
        if running is not None:
            outcome = await asyncio.shield(running)
            return await load() if outcome is _FAILED else outcome
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._loading[key] = future
        outcome = _FAILED
        try:
            outcome = value = await load()
            return value
        finally:
            future.set_result(outcome)
            if self._loading.get(key) is future:
                del self._loading[key]

    # programmes by api-key hash

    def programme(self, key_hash: str) -> Programme | None:
        hit = self.programmes.get(key_hash)
        if hit is None or _monotonic_ms() - hit[0] > FRESH_MS:
            return None
        return hit[1]

    def remember_programme(self, key_hash: str, programme: Programme) -> None:
        if len(self.programmes) >= MAX_ENTRIES:
            self.programmes.clear()
        self.programmes[key_hash] = (_monotonic_ms(), programme)

    # sessions by id

    def session(self, session_id: int) -> SessionEntry | None:
        hit = self.sessions.get(session_id)
        if hit is None or _monotonic_ms() - hit.seen_at > FRESH_MS:
            return None
        return hit

    def session_however_old(self, session_id: int) -> SessionEntry | None:
        """What this process remembers of a session, however old: only for a request whose
        transaction checks the session live itself and that reads nothing else of it
        (`api/deps.py`, `checks_session_in_transaction`)."""
        return self.sessions.get(session_id)

    def remember_session(self, row: AuthSession) -> SessionEntry:
        if len(self.sessions) >= MAX_ENTRIES:
            self.sessions.clear()
        entry = SessionEntry(row, _monotonic_ms(), row.last_seen_at)
        self.sessions[row.id] = entry
        return entry

    def forget_session(self, session_id: int) -> None:
        self.sessions.pop(session_id, None)

    def clear(self, programmes: bool = False, sessions: bool = False) -> None:
        # A load that began before the change may return the old row: requests that come
        # after it load again.
        if programmes:
            self.programmes.clear()
            self._forget_loads("programme")
        if sessions:
            self.sessions.clear()
            self._forget_loads("session")

    def _forget_loads(self, kind: str) -> None:
        for key in [k for k in self._loading if isinstance(k, tuple) and k[0] == kind]:
            del self._loading[key]


# Every cache of this process (one per container; tests build several).
_caches: list[AuthCache] = []


def new_cache() -> AuthCache:
    cache = AuthCache()
    _caches.append(cache)
    return cache


def cache_of(container: Container) -> AuthCache:
    """The cache of a container (one per server process; tests build several)."""
    cache: AuthCache | None = container.caches.get("auth")
    if cache is None:
        cache = container.caches["auth"] = new_cache()
    return cache


def _drop(programmes: bool, sessions: bool) -> None:
    if programmes or sessions:
        for cache in _caches:
            cache.clear(programmes=programmes, sessions=sessions)


def _touches(classes: set[type[Any]]) -> tuple[bool, bool]:
    return bool(classes & {Programme, ApiKey}), AuthSession in classes


@event.listens_for(Session, "after_flush")
def _after_flush(session: Session, _flush: UOWTransaction) -> None:
    # A new row (a login's session, a new key) changes nothing remembered.
    classes = {type(o) for o in (*session.dirty, *session.deleted)}
    programmes, sessions = _touches(classes)
    if programmes or sessions:
        _drop(programmes, sessions)
        pending = session.info.setdefault("authcache_drop", [False, False])
        pending[0] |= programmes
        pending[1] |= sessions


@event.listens_for(Session, "do_orm_execute")
def _on_execute(state: ORMExecuteState) -> None:
    if not (state.is_update or state.is_delete):
        return
    classes = {m.class_ for m in state.all_mappers}
    programmes, sessions = _touches(classes)
    if programmes or sessions:
        _drop(programmes, sessions)
        pending = state.session.info.setdefault("authcache_drop", [False, False])
        pending[0] |= programmes
        pending[1] |= sessions


@event.listens_for(Session, "after_commit")
def _after_commit(session: Session) -> None:
    # Again once committed: a concurrent request may have read the old rows in between.
    pending = session.info.pop("authcache_drop", None)
    if pending:
        _drop(pending[0], pending[1])


@event.listens_for(Session, "after_rollback")
def _after_rollback(session: Session) -> None:
    session.info.pop("authcache_drop", None)
