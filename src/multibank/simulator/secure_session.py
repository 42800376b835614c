"""The sandbox's secure session (D20, D21, cards.md §2.4): tokenize a chosen value (a PIN for an
upgrade) and show the card's owner the value behind a token. `programme-key` as every simulator
operation; detokenize also needs the owner's Bearer token (tokenize takes one optionally: its
tokens are then that identity's). Live programmes: 404, like the whole simulator."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import Request
from pydantic import BaseModel, Field, StringConstraints

from multibank.api.deps import AppContainer, BearerHeader, Db, authenticate
from multibank.api.routing import UnitOfWorkRouter
from multibank.cards import tokens
from multibank.kernel.wire import StrictBody as SimRequest
from multibank.programmes.context import Ctx
from multibank.simulator.deps import ProgrammeKey, SimulatorIdempotent, SimulatorProgramme

router = UnitOfWorkRouter(tags=["Simulator"])
TokenField = Literal["CARD_NUMBER", "CVV", "PIN", "PASSWORD"]
BEARER_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"description": "The Bearer token is missing, unknown or of a session that ended"},
    403: {"description": "The Bearer token is of another programme"},
}


class TokenizeValue(SimRequest):
    # Printable ASCII: a PIN, a number, a CVV or a password.
    value: Annotated[str, StringConstraints(pattern=r"^[ -~]+$", min_length=1, max_length=100)]
    field: TokenField


class Tokenize(SimRequest):
    values: Annotated[
        # Names are the caller's labels for its values: letters, digits, `_`, `-`, `.`.
        dict[
            Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]{1,50}$")],
            TokenizeValue,
        ],
        # A name outside the pattern is refused (400), so the description says so.
        Field(min_length=1, max_length=10, json_schema_extra={"additionalProperties": False}),
    ]


class Tokens(BaseModel):
    tokens: dict[str, str]


class Detokenize(SimRequest):
    token: Annotated[str, StringConstraints(min_length=1, max_length=100)]
    field: TokenField


class Detokenized(BaseModel):
    value: str


@router.post(
    "/secure_session/tokenize",
    operation_id="simulateSecureSessionTokenize",
    # The owner's Bearer token is optional here (D21): the programme key alone, or both.
    openapi_extra={
        "x-security-alternatives": [
            {"API_Secret_Key": []},
            {"API_Secret_Key": [], "auth_token": []},
        ]
    },
    dependencies=[SimulatorIdempotent],
    responses=BEARER_RESPONSES,
)
async def tokenize(
    request: Request,
    body: Tokenize,
    programme: SimulatorProgramme,
    key: ProgrammeKey,
    bearer: BearerHeader,
    db: Db,
    container: AppContainer,
) -> Tokens:
    """A token for each named value, e.g. `{"values": {"pin": {"value": "1234", "field":
    "PIN"}}}` → `{"tokens": {"pin": "…"}}`; a PIN token is the upgrade's `pin.value`."""
    identity_id = None
    now = container.clock.now_ms(programme.clock_offset_ms)
    if bearer:
        caller = await authenticate(request, (key or "").strip(), bearer)
        identity_id, now = caller.session.identity_id, caller.now_ms
    values: dict[str, tuple[str, str]] = {n: (v.value, v.field) for n, v in body.values.items()}
    made = await tokens.tokenize(
        Ctx(db, programme, now), container.card_keys(), identity_id, values
    )
    return Tokens(tokens=made)


@router.post(
    "/secure_session/detokenize",
    operation_id="simulateSecureSessionDetokenize",
    responses=BEARER_RESPONSES,
)
async def detokenize(
    request: Request,
    body: Detokenize,
    programme: SimulatorProgramme,
    key: ProgrammeKey,
    bearer: BearerHeader,
    db: Db,
    container: AppContainer,
) -> Detokenized:
    """The value behind a token of one of the caller's identity's cards (`CARD_NUMBER`,
    `CVV`, `PIN`) or of `tokenize`; anything else, another identity's token included, is 400."""
    caller = await authenticate(request, (key or "").strip(), bearer)
    value = await tokens.detokenize(
        Ctx(db, programme, caller.now_ms),
        container.card_keys(),
        caller.session.identity_id,
        body.token,
        body.field,
    )
    return Detokenized(value=value)
