"""`programme-key` authentication of the simulator; live programmes do not have one (404)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import APIKeyHeader

from multibank.api.deps import AppContainer, authenticate_programme, begin_idempotent
from multibank.api.openapi import IDEMPOTENCY_REF, answers, secured
from multibank.api.scope import scope_of
from multibank.kernel.errors import BadRequest, NotFound, Unauthorized
from multibank.programmes.models import Programme
from multibank.programmes.service import programme_for_api_key

# Declared by the dependencies that read the header themselves (`programme_key_of`), as the
# api-key is (api/deps.py): the documents name it, no request solves it.
programme_key_scheme = APIKeyHeader(
    name="programme-key", scheme_name="API_Secret_Key", auto_error=False
)


def programme_key_of(request: Request) -> str | None:
    """The `programme-key` header, None when absent or empty (as `programme_key_scheme`)."""
    return request.headers.get("programme-key") or None


@secured(programme_key_scheme)
async def programme_key(request: Request) -> str | None:
    return programme_key_of(request)


ProgrammeKey = Annotated[str | None, Depends(programme_key)]


def _required(key: str | None) -> str:
    if not key or not key.strip():
        raise BadRequest(
            "programme-key header is required",
            [{"fieldName": "programme-key", "error": "REQUIRED", "params": []}],
        )
    return key.strip()


@secured(programme_key_scheme)
@answers(400, 401, 404)
async def simulator_programme(request: Request) -> Programme:
    key = _required(programme_key_of(request))
    scope = scope_of(request)
    programme = await programme_for_api_key(scope.session, key)
    if programme is None:
        raise Unauthorized()
    if programme.mode != "sandbox":
        raise NotFound("The simulator is only available to sandbox programmes")
    scope.programme = programme
    return programme


SimulatorProgramme = Annotated[Programme, Depends(simulator_programme)]


@secured(programme_key_scheme)
@answers(400, 401, 404)
async def simulator_programme_remembered(request: Request) -> Programme:
    """The programme of the key as the api-key routes have it (`authenticate_programme`):
    remembered for half a second, a read-only snapshot (api/authcache.py, decision 0013). For
    the card payment steps (decision 0060), which read the programme and never change it; a
    route that changes it (the clock's advance) takes `simulator_programme`'s live row."""
    programme = await authenticate_programme(request, _required(programme_key_of(request)))
    if programme.mode != "sandbox":
        raise NotFound("The simulator is only available to sandbox programmes")
    return programme


RememberedSimulatorProgramme = Annotated[Programme, Depends(simulator_programme_remembered)]


@answers(400, 413, IDEMPOTENCY_REF)
async def simulator_idempotency(
    request: Request, programme: SimulatorProgramme, container: AppContainer
) -> None:
    """D6 on the simulator too: a retried deposit or clock advance has one effect."""
    now = container.clock.now_ms(programme.clock_offset_ms)
    await begin_idempotent(request, scope_of(request), programme, now, "simulator")


SimulatorIdempotent = Depends(simulator_idempotency)


@answers(400, 413, IDEMPOTENCY_REF)
async def card_simulator_idempotency(
    request: Request, programme: RememberedSimulatorProgramme, container: AppContainer
) -> None:
    """`simulator_idempotency` for the card payment steps, on the remembered programme."""
    now = container.clock.now_ms(programme.clock_offset_ms)
    await begin_idempotent(request, scope_of(request), programme, now, "simulator")


CardSimulatorIdempotent = Depends(card_simulator_idempotency)
