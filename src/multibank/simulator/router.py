"""Simulator operations. More arrive with the features they drive (deposits, KYC, challenges)."""

from __future__ import annotations

from fastapi import APIRouter, FastAPI
from pydantic import BaseModel, Field

from multibank.api.deps import AppContainer, Db
from multibank.api.errors import install_error_handlers
from multibank.api.routing import UnitOfWorkRoute
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
