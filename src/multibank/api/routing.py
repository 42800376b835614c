"""Per-request transactions, idempotent replays, and the composition of version applications.

Every route of the public, simulator and portal APIs uses `UnitOfWorkRoute`: the request opens
one database session, commits it when the handler answers below 400 and rolls it back otherwise,
so a refused request changes nothing and a successful one is all-or-nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterable, Sequence
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.routing import APIRoute
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.routing import BaseRoute

from multibank.kernel.context import Container
from multibank.kernel.errors import DomainError, NotFound
from multibank.kernel.idempotency import IdempotencyRecord, IdempotencyStore


def container_of(request: Request) -> Container:
    container: Container = request.scope["multibank"]
    return container


class UnitOfWorkRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def run(request: Request) -> Response:
            container = container_of(request)
            db = container.db
            # A read (GET, HEAD) runs its statements in autocommit: no BEGIN/COMMIT round trips
            # and, on SQLite, no queueing behind the writer. What a read writes (a session
            # renewal, a due IBAN allocation) is one guarded statement at a time.
            reads = request.method in ("GET", "HEAD")
            if reads:
                async with db.read_sessionmaker() as session:
                    request.state.db = session
                    return await handler(request)  # autocommit: nothing to commit or undo
            async with db.sessionmaker() as session:
                request.state.db = session
                try:
                    response = await handler(request)
                except DomainError as exc:
                    if exc.keep_changes:
                        await _commit_refusal(request, session)
                    else:
                        await session.rollback()
                    raise
                except BaseException:
                    await session.rollback()
                    raise
                if response.status_code >= 400:
                    await session.rollback()
                    return response
                record: IdempotencyRecord | None = getattr(
                    request.state, "idempotency_record", None
                )
                if record is not None:
                    await IdempotencyStore(session).complete(
                        record,
                        response.status_code,
                        response.headers.get("content-type"),
                        bytes(response.body),
                    )
                await session.commit()
                return response

        return run


async def _commit_refusal(request: Request, session: AsyncSession) -> None:
    """Keeps what a refused request had to record, but never its idempotency placeholder: a
    refusal is not stored as the ref's answer, so a retry runs again."""
    record: IdempotencyRecord | None = getattr(request.state, "idempotency_record", None)
    if record is not None:
        await session.delete(record)
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
    out = APIRouter(route_class=UnitOfWorkRoute)
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
    out = APIRouter(route_class=UnitOfWorkRoute)
    for router in lacking:
        for route in router.routes:
            assert isinstance(route, APIRoute)
            if operation_key(route) not in served:
                _add_absent(out, route)
    return out
