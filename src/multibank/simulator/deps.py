"""`programme-key` authentication of the simulator; live programmes do not have one (404)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import APIKeyHeader

from multibank.api.deps import AppContainer, Db, authenticate_programme, begin_idempotent
from multibank.api.openapi import IDEMPOTENCY_REF, answers
from multibank.kernel.errors import BadRequest, NotFound, Unauthorized
from multibank.programmes.models import Programme
from multibank.programmes.service import programme_for_api_key

programme_key_scheme = APIKeyHeader(
    name="programme-key", scheme_name="API_Secret_Key", auto_error=False
)


def _required(key: str | None) -> str:
    if not key or not key.strip():
        raise BadRequest(
            "programme-key header is required",
            [{"fieldName": "programme-key", "error": "REQUIRED", "params": []}],
        )
    return key.strip()


@answers(400, 401, 404)
async def simulator_programme(
    request: Request, db: Db, key: Annotated[str | None, Depends(programme_key_scheme)]
) -> Programme:
    programme = await programme_for_api_key(db, _required(key))
    if programme is None:
        raise Unauthorized()
    if programme.mode != "sandbox":
        raise NotFound("The simulator is only available to sandbox programmes")
    request.state.programme = programme
    return programme


SimulatorProgramme = Annotated[Programme, Depends(simulator_programme)]


@answers(400, 401, 404)
async def simulator_programme_remembered(
    request: Request, key: Annotated[str | None, Depends(programme_key_scheme)]
) -> Programme:
    """The programme of the key as the api-key routes have it (`authenticate_programme`):
    remembered for half a second, a read-only snapshot (api/authcache.py, decision 0013). For
    the card payment steps (decision 0060), which read the programme and never change it; a
    route that changes it (the clock's advance) takes `simulator_programme`'s live row."""
    programme = await authenticate_programme(request, _required(key))
    if programme.mode != "sandbox":
        raise NotFound("The simulator is only available to sandbox programmes")
    return programme


RememberedSimulatorProgramme = Annotated[Programme, Depends(simulator_programme_remembered)]


@answers(400, 413, IDEMPOTENCY_REF)
async def simulator_idempotency(
    request: Request, db: Db, programme: SimulatorProgramme, container: AppContainer
) -> None:
    """D6 on the simulator too: a retried deposit or clock advance has one effect."""
    now = container.clock.now_ms(programme.clock_offset_ms)
    await begin_idempotent(request, db, programme, now, "simulator")


SimulatorIdempotent = Depends(simulator_idempotency)


@answers(400, 413, IDEMPOTENCY_REF)
async def card_simulator_idempotency(
    request: Request, db: Db, programme: RememberedSimulatorProgramme, container: AppContainer
) -> None:
    """`simulator_idempotency` for the card payment steps, on the remembered programme."""
    now = container.clock.now_ms(programme.clock_offset_ms)
    await begin_idempotent(request, db, programme, now, "simulator")


CardSimulatorIdempotent = Depends(card_simulator_idempotency)
