"""`programme-key` authentication of the simulator; live programmes do not have one (404)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import APIKeyHeader

from multibank.api.deps import AppContainer, Db, begin_idempotent
from multibank.api.openapi import IDEMPOTENCY_REF, answers
from multibank.kernel.errors import BadRequest, NotFound, Unauthorized
from multibank.programmes.models import Programme
from multibank.programmes.service import programme_for_api_key

programme_key_scheme = APIKeyHeader(
    name="programme-key", scheme_name="API_Secret_Key", auto_error=False
)


@answers(400, 401, 404)
async def simulator_programme(
    request: Request, db: Db, key: Annotated[str | None, Depends(programme_key_scheme)]
) -> Programme:
    if not key or not key.strip():
        raise BadRequest(
            "programme-key header is required",
            [{"fieldName": "programme-key", "error": "REQUIRED", "params": []}],
        )
    programme = await programme_for_api_key(db, key.strip())
    if programme is None:
        raise Unauthorized()
    if programme.mode != "sandbox":
        raise NotFound("The simulator is only available to sandbox programmes")
    request.state.programme = programme
    return programme


SimulatorProgramme = Annotated[Programme, Depends(simulator_programme)]


@answers(400, 413, IDEMPOTENCY_REF)
async def simulator_idempotency(
    request: Request, db: Db, programme: SimulatorProgramme, container: AppContainer
) -> None:
    """D6 on the simulator too: a retried deposit or clock advance has one effect."""
    now = container.clock.now_ms(programme.clock_offset_ms)
    await begin_idempotent(request, db, programme, now, "simulator")


SimulatorIdempotent = Depends(simulator_idempotency)
