"""Simulator operations. More arrive with the features they drive (deposits, KYC, challenges)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Depends, FastAPI, Path, Response
from pydantic import BaseModel, Field

from multibank.api.deps import AppContainer, Db
from multibank.api.errors import install_error_handlers
from multibank.api.routing import UnitOfWorkRoute
from multibank.identities import service as identities
from multibank.identities.models import CONSUMER, CORPORATE
from multibank.kernel.errors import NotFound
from multibank.kernel.validation import parse_id
from multibank.programmes.context import Ctx
from multibank.programmes.service import advance_clock
from multibank.simulator.deps import SimulatorIdempotent, SimulatorProgramme

router = APIRouter(tags=["Simulator"], route_class=UnitOfWorkRoute)


class ClockAdvance(BaseModel):
    seconds: int = Field(ge=1, le=10 * 365 * 86400)


class ClockState(BaseModel):
    offsetSeconds: int
    now: int


@router.post(
    "/clock/advance", operation_id="simulateClockAdvance", dependencies=[SimulatorIdempotent]
)
async def clock_advance(
    body: ClockAdvance, programme: SimulatorProgramme, db: Db, container: AppContainer
) -> ClockState:
    """Moves this programme's clock forward, so token, code and invite expiry can be tested."""
    offset_ms = await advance_clock(db, programme, body.seconds)
    return ClockState(offsetSeconds=offset_ms // 1000, now=container.clock.now_ms(offset_ms))


class Reject(BaseModel):
    permanent: bool = False


def _simulator_ctx(db: Db, programme: SimulatorProgramme, container: AppContainer) -> Ctx:
    return Ctx(db, programme, container.clock.now_ms(programme.clock_offset_ms))


SimCtx = Annotated[Ctx, Depends(_simulator_ctx)]
IdentityPath = Annotated[str, Path(pattern=r"^[0-9]+$")]


async def _identity_id(ctx: Ctx, value: str, kind: str) -> int:
    number = parse_id(value)
    if number is None:
        raise NotFound("Identity not found")
    await identities.load(ctx, number, kind)
    return number


@router.post(
    "/corporates/{corporate_id}/verify",
    operation_id="simulateCorporateVerify",
    status_code=204,
    response_class=Response,
    dependencies=[SimulatorIdempotent],
)
async def corporate_verify(corporate_id: IdentityPath, ctx: SimCtx) -> Response:
    """Fully verifies a corporate: root e-mail and mobile verified, KYB APPROVED."""
    await identities.simulate_verify(
        ctx, await _identity_id(ctx, corporate_id, CORPORATE), CORPORATE
    )
    return Response(status_code=204)


@router.post(
    "/consumers/{consumer_id}/verify",
    operation_id="simulateConsumerVerify",
    status_code=204,
    response_class=Response,
    dependencies=[SimulatorIdempotent],
)
async def consumer_verify(consumer_id: IdentityPath, ctx: SimCtx) -> Response:
    """Fully verifies a consumer: e-mail and mobile verified, KYC APPROVED."""
    number = await _identity_id(ctx, consumer_id, CONSUMER)
    await identities.simulate_verify(ctx, number, CONSUMER)
    return Response(status_code=204)


@router.post(
    "/corporates/{corporate_id}/reject",
    operation_id="simulateCorporateReject",
    status_code=204,
    response_class=Response,
    dependencies=[SimulatorIdempotent],
)
async def corporate_reject(
    corporate_id: IdentityPath, ctx: SimCtx, body: Reject | None = Body(default=None)
) -> Response:
    """Rejects a corporate's KYB; a permanent rejection refuses a new start."""
    number = await _identity_id(ctx, corporate_id, CORPORATE)
    await identities.simulate_reject(ctx, number, CORPORATE, bool(body and body.permanent))
    return Response(status_code=204)


@router.post(
    "/consumers/{consumer_id}/reject",
    operation_id="simulateConsumerReject",
    status_code=204,
    response_class=Response,
    dependencies=[SimulatorIdempotent],
)
async def consumer_reject(
    consumer_id: IdentityPath, ctx: SimCtx, body: Reject | None = Body(default=None)
) -> Response:
    number = await _identity_id(ctx, consumer_id, CONSUMER)
    await identities.simulate_reject(ctx, number, CONSUMER, bool(body and body.permanent))
    return Response(status_code=204)


ROUTERS: list[APIRouter] = [router]


def build_simulator() -> FastAPI:
    app = FastAPI(
        title="multibank sandbox simulator",
        version="1",
        openapi_url="/openapi.json",
        docs_url="/docs",
        redoc_url=None,
    )
    install_error_handlers(app)
    for r in ROUTERS:
        app.include_router(r)
    return app
