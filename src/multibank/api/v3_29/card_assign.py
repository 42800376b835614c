"""`POST /managed_cards/assign` (3.29.1 only, D18, D31): a pool card for the caller's identity.
Registered before the managed-cards router, so `assign` is not read as a card id."""

from __future__ import annotations

from typing import Any

from multibank.api.deps import (
    STEP_UP_RESPONSES,
    AppContainer,
    CallerIdempotent,
    StepUpRequired,
    conflicts,
)
from multibank.api.routing import UnitOfWorkRouter
from multibank.api.v3_29.managed_cards import card_body, owner
from multibank.cards import pool
from multibank.cards.schemas import ManagedCardRead

router = UnitOfWorkRouter(tags=["Managed Cards"])
ASSIGN_CONFLICTS = (
    "IDENTITY_NOT_VERIFIED",
    "INSTRUMENT_NOT_FOUND",
    "ACTIVATION_CODE_INVALID",
    "MODEL_CONSTRAINTS_VIOLATED",
    "THREEDS_DETAILS_NOT_PROVIDED",
    "AUTH_FORWARDING_NOT_ENABLED",
)


@router.post(
    "/managed_cards/assign",
    operation_id="managedCardAssign",
    response_model=ManagedCardRead,
    response_model_exclude_none=True,
    dependencies=[CallerIdempotent],
    responses={**conflicts(*ASSIGN_CONFLICTS), **STEP_UP_RESPONSES},
)
async def managed_card_assign(
    body: pool.ManagedCardAssign, session: StepUpRequired, container: AppContainer
) -> dict[str, Any]:
    """Claims an unassigned prepaid card of the programme's card pool for the caller's
    identity, with the `externalReference` and `activationCode` the operator handed out. An
    unknown reference and one already assigned both answer `INSTRUMENT_NOT_FOUND`; a pool card
    of the other identity type `MODEL_CONSTRAINTS_VIOLATED`. The identity must be verified;
    `cardholderMobileNumber` is needed (`THREEDS_DETAILS_NOT_PROVIDED`)."""
    keys = container.card_keys()
    row = await pool.assign(session.ctx, keys, owner(session), body)
    return card_body(keys, *row)
