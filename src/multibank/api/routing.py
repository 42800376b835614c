"""Per-request transactions, idempotent replays, and the composition of version applications.

Every route of the public, simulator and portal APIs uses `UnitOfWorkRoute` (their routers are
`UnitOfWorkRouter`s): the request has one `RequestScope` (api/scope.py) holding at most one
database session, made when a statement first needs it; a write commits it when the handler
answers below 400 and rolls it back otherwise, so a refused request changes nothing and a
successful one is all-or-nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.routing import BaseRoute

from multibank.api.routebase import WrappedRoute
from multibank.api.scope import SCOPE_KEY, RequestScope
from multibank.container import Container
from multibank.kernel import conflicts
from multibank.kernel.errors import DomainError, NotFound
from multibank.kernel.idempotency import IdempotencyStore, send_held

log = logging.getLogger("multibank.requests")
# In a write's `session.info`: what it does once its transaction is committed (`after_commit`).
AFTER_COMMIT = "multibank.after_commit"


def after_commit(db: AsyncSession, work: Callable[[], Awaitable[object]]) -> None:
    """`work` runs once the write request's transaction is committed, before it answers, in
    transactions of its own (the clock's advance: the steps its new time makes due, each alone,
    so that no step waits for a row while the request holds others). Its failure is logged and
    leaves the answer as committed: what it does is also done by the background workers."""
    db.info.setdefault(AFTER_COMMIT, []).append(work)


async def _after_commit(session: AsyncSession) -> None:
    for work in session.info.pop(AFTER_COMMIT, None) or ():
        try:
            await work()
        except Exception:
            log.exception("work after a commit failed; the background workers take it up")


def container_of(request: Request) -> Container:
    container: Container = request.scope["multibank"]
    return container


Handler = Callable[[Request], Coroutine[Any, Any, Response]]


class UnitOfWorkRoute(WrappedRoute):
    """A route of the server's APIs: its request's `RequestScope` (api/scope.py), made here and
    kept in the ASGI scope, and its unit of work (this module's docstring)."""

    def wrap(self, handler: Handler) -> Handler:
        async def run(request: Request) -> Response:
            db = container_of(request).db
            if request.method in ("GET", "HEAD"):
                # A read runs its statements in autocommit (the read engine): no BEGIN/COMMIT
                # round trips and, on SQLite, no queueing behind the writer. What a read writes
                # (a session renewal, a due IBAN allocation) is one guarded statement at a time.
                scope = RequestScope(db, read_only=True)
                request.scope[SCOPE_KEY] = scope
                try:
                    return await handler(request)  # autocommit: nothing to commit or undo
                finally:
                    if scope.opened is not None:
                        await scope.opened.close()
            scope = RequestScope(db, read_only=False)
            request.scope[SCOPE_KEY] = scope
            return await attempts(handler, request, scope)

        return run


async def attempts(handler: Handler, request: Request, scope: RequestScope) -> Response:
    """`write`, run again while its transaction loses a race in the database (a deadlock
    or a serialization failure, kernel/conflicts.py), up to `conflicts.ATTEMPTS` runs in
    all; the last run's error is the answer (503, api/errors.py). Safe: nothing of the
    lost run was kept (its idempotency claim neither), nothing was sent to the client
    (the answer is sent once this returns), and the body it read is kept by the request
    (api/routebase.py: one request object for every run) for the next run to read again."""
    attempt = 1
    while True:
        try:
            return await write(handler, request, scope)
        except Exception as error:
            if attempt >= conflicts.ATTEMPTS or not conflicts.lost_race(error):
                raise
            log.warning(
                "%s %s lost a race in the database (%s) and ran again",
                request.method,
                request.url.path,
                conflicts.sqlstate(error),
            )
        scope.next_attempt()
        await asyncio.sleep(conflicts.pause(attempt))
        attempt += 1


async def write(handler: Handler, request: Request, scope: RequestScope) -> Response:
    # A write: one session transaction on one connection, begun at its first
    # statement, committed below an answer of 400 and rolled back otherwise. The
    # session is made by the first dependency or service that needs it: a write that
    # ran no statement has nothing to commit or undo.
    try:
        try:
            try:
                response = await handler(request)
            except Exception:
                await _send_held(scope)  # a held session check answers first (0064)
                raise
            await _send_held(scope)
        except DomainError as exc:
            if scope.opened is not None:
                if exc.keep_changes:
                    await _commit_refusal(scope, scope.opened, exc)
                else:
                    await scope.opened.rollback()
            raise
        except BaseException:
            if scope.opened is not None:
                await scope.opened.rollback()
            raise
        session = scope.opened
        if session is None:
            return response
        if response.status_code >= 400:
            await session.rollback()
            return response
        record = scope.idempotency_record
        if record is not None:  # the answer is stored in the same transaction
            await IdempotencyStore(session).complete(
                record,
                response.status_code,
                response.headers.get("content-type"),
                bytes(response.body),
            )
        await session.commit()
        await _after_commit(session)
        return response
    finally:
        # Committed or rolled back above (a rollback that was itself interrupted leaves
        # the connection to the pool's reset on return).
        if scope.opened is not None:
            await scope.opened.close()


class UnitOfWorkRouter(APIRouter):
    """The router of every part of the server's APIs (versions, simulator, portal): its routes
    are `UnitOfWorkRoute`s unless it names a subclass of it, so none can go without its request
    scope and transaction (tests/api/test_request_scope.py checks every route of the app)."""

    def __init__(self, *, route_class: type[APIRoute] = UnitOfWorkRoute, **kwargs: Any) -> None:
        if not issubclass(route_class, UnitOfWorkRoute):
            raise TypeError(f"{route_class.__name__} is not a UnitOfWorkRoute")
        super().__init__(route_class=route_class, **kwargs)


async def _send_held(scope: RequestScope) -> None:
    if scope.opened is not None:
        await send_held(scope.opened)


async def _commit_refusal(scope: RequestScope, session: AsyncSession, exc: DomainError) -> None:
    """Keeps what a refused request had to record. Its idempotency placeholder goes, so a retry
    runs again, unless the refusal itself is the answer the ref keeps (`store_answer`)."""
    record = scope.idempotency_record
    if record is not None:
        if exc.store_answer:
            body = exc.body()
            content = b"" if body is None else JSONResponse(body).body
            await IdempotencyStore(session).complete(
                record,
                exc.status_code,
                None if body is None else "application/json",
                bytes(content),
            )
        else:
            await IdempotencyStore(session).release(record)
    await session.commit()


ABSENT = "This operation does not exist in this version"


async def _absent() -> None:
    raise NotFound(ABSENT)


def _add_absent(out: APIRouter, route: APIRoute) -> None:
    # An operation a version lacks answers 404 (D2), also where its path looks like another
    # route's (`POST /users/kyc` against `GET /users/{user_id}`), which would otherwise be a 405.
    out.add_api_route(
        route.path,
        _absent,
        methods=sorted(route.methods or ()),
        include_in_schema=False,
        operation_id=f"absent_{route.operation_id}",
    )


def operation_key(route: BaseRoute) -> tuple[str, str]:
    assert isinstance(route, APIRoute)
    method = next(iter(sorted(route.methods or {"GET"})))
    return method, route.path


def compose(
    base: Sequence[APIRouter],
    overrides: Iterable[APIRouter] = (),
    removed: Iterable[str] = (),
) -> APIRouter:
    """One version's routes: `base` minus the operation ids in `removed`, with every route of
    `overrides` replacing the base route of the same method and path (or adding a new one).

    This is how 3.1.0 reuses the 3.29.1 operations and writes down only what differs.
    """
    removed_ids = set(removed)
    override_routes = [r for router in overrides for r in router.routes]
    replaced = {operation_key(r) for r in override_routes}
    out = UnitOfWorkRouter()
    seen: set[str] = set()
    gone: list[APIRoute] = []
    for router in base:
        for route in router.routes:
            assert isinstance(route, APIRoute)
            if route.operation_id in removed_ids:
                gone.append(route)
            if route.operation_id in removed_ids or operation_key(route) in replaced:
                seen.add(route.operation_id or "")
                continue
            out.routes.append(route)
    for route in gone:
        _add_absent(out, route)
    unknown = (
        removed_ids
        - seen
        - {r.operation_id for router in base for r in router.routes if isinstance(r, APIRoute)}
    )
    if unknown:
        raise ValueError(f"cannot remove unknown operations: {sorted(unknown)}")
    out.routes.extend(override_routes)
    return out


def absent(lacking: Iterable[APIRouter], having: Sequence[APIRouter]) -> APIRouter:
    """404 routes, for the operations of `lacking` (another version's routers) that `having`
    does not serve: `POST /multi/managed_accounts/{id}/remove` answers as every operation
    3.29.1 lacks."""
    served = {operation_key(r) for router in having for r in router.routes}
    out = UnitOfWorkRouter()
    for router in lacking:
        for route in router.routes:
            assert isinstance(route, APIRoute)
            if operation_key(route) not in served:
                _add_absent(out, route)
    return out
