"""Access tag."""

from __future__ import annotations

from fastapi import APIRouter, Response

from multibank.api.deps import CallerIdempotent, CurrentCaller, Db, Now
from multibank.api.routing import UnitOfWorkRoute
from multibank.kernel.tokens import end_session

router = APIRouter(tags=["Access"], route_class=UnitOfWorkRoute)


@router.post(
    "/logout",
    operation_id="logout",
    status_code=204,
    response_class=Response,
    dependencies=[CallerIdempotent],
)
async def logout(caller: CurrentCaller, db: Db, clock: Now) -> Response:
    """Ends the session the bearer token names; the token answers 401 from now on."""
    await end_session(db, caller.session.id, clock.now_ms())
    return Response(status_code=204)
