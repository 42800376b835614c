"""Linked accounts on the 3.63 line (v3.63.md §4, D39, D44, D45): an identity's own accounts at
other banks. Created `PENDING_VERIFICATION` with a verification run of three steps (the root
user's declaration by a batch challenge, a transfer instruction, internal checks), `ACTIVE` once
all are done; blocked, unblocked and removed by their owner (`linked_accounts.service`)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path, Query, Response

from multibank.api.deps import (
    STEP_UP_RESPONSES,
    CallerIdempotent,
    LoggedIn,
    Session,
    StepUpRequired,
    conflicts,
)
from multibank.api.openapi import not_found
from multibank.api.routing import UnitOfWorkRouter
from multibank.kernel.errors import Conflict
from multibank.kernel.validation import parse_id
from multibank.kernel.vocabulary import Currency, Tag
from multibank.linked_accounts import repository, service
from multibank.linked_accounts.events import body as account_body
from multibank.linked_accounts.models import REMOVED
from multibank.linked_accounts.schemas import (
    LinkedAccountCreate,
    LinkedAccountRead,
    LinkedAccountsPage,
    LinkedAccountUpdate,
    VerificationRunsPage,
)
from multibank.payments import repository as payments_repo

router = UnitOfWorkRouter(tags=["Linked Accounts"])
LinkedAccountId = Annotated[str, Path(pattern=r"^[0-9]+$", max_length=19)]
# The list's `state` takes the account's states; `DESTROYED` (the `InstrumentState` the
# description types the filter with) is read as `REMOVED` (D39).
StateValue = Annotated[
    str, Query(pattern="^(PENDING_VERIFICATION|BLOCKED|ACTIVE|REJECTED|REMOVED|DESTROYED)$")
]
RunStateValue = Annotated[str, Query(pattern="^(PENDING|VERIFIED|REJECTED)$")]
Offset = Annotated[int, Query(ge=0, le=2**31 - 1)]
Limit = Annotated[int | None, Query(ge=1, le=100)]
Ms = Annotated[int | None, Query(ge=0, le=2**63 - 1)]
CREATE_CONFLICTS = (
    "PROFILE_NOT_FOUND",
    "PROFILE_INACTIVE",
    "MANAGED_ACCOUNT_MISSING",
    "INVALID_IDENTITY_TYPE",
    "ACCOUNT_NUMBER_AND_IBAN_PROVIDED",
    "SORT_CODE_AND_IBAN_PROVIDED",
    "SORT_CODE_MISSING",
    "ACCOUNT_NUMBER_MISSING",
    "NO_ACCOUNT_DETAILS_PROVIDED",
    "ACCOUNT_DESCRIPTOR_MISSING",
    "IBAN_MISSING",
    "CURRENCY_NOT_SUPPORTED_BY_PROFILE",
    "COUNTRY_NOT_SUPPORTED_BY_PROFILE",
    "THIS_IS_A_MANAGED_ACCOUNT",
    "LINKED_ACCOUNT_ALREADY_ADDED",
    "MODEL_CONSTRAINTS_VIOLATED",
)
MISSING = not_found("no linked account of the caller's identity has this id")


def owner(session: Session) -> service.Owner:
    return service.Owner(session.auth.identity_id, session.auth.identity_type)


# Over 8 parameters: each of the interface's filters is a query parameter of its own.
@router.get(
    "/linked_accounts",
    operation_id="linkedAccountsGet",
    response_model=LinkedAccountsPage,
    response_model_exclude_none=True,
    responses=STEP_UP_RESPONSES,
)
async def linked_accounts_get(
    session: StepUpRequired,
    offset: Offset = 0,
    limit: Limit = None,
    profileId: Annotated[str | None, Query(pattern=r"^[0-9]+$", max_length=19)] = None,
    friendlyName: Annotated[str | None, Query(min_length=1, max_length=50)] = None,
    state: Annotated[list[StateValue] | None, Query()] = None,
    currency: Annotated[Currency | None, Query()] = None,
    createdFrom: Ms = None,
    createdTo: Ms = None,
    tag: Annotated[Tag | None, Query()] = None,
) -> dict[str, Any]:
    """The caller's identity's linked accounts, newest first, in pages of at most 100; repeated
    keys for `state` (`?state=ACTIVE&state=BLOCKED`), whose `DESTROYED` means `REMOVED`."""
    filters = repository.Filters(
        profile_id=parse_id(profileId) if profileId else None,
        friendly_name=friendlyName,
        states=sorted({REMOVED if s == "DESTROYED" else s for s in state or ()}),
        currency=currency,
        created_from=createdFrom,
        created_to=createdTo,
        tag=tag,
    )
    if profileId and filters.profile_id is None:  # beyond int64: no profile has it
        return {"accounts": [], "count": 0, "responseCount": 0}
    total, rows = await service.page(session.ctx, session.identity_id, filters, offset, limit)
    return {
        "accounts": [account_body(a) for a in rows],
        "count": total,
        "responseCount": len(rows),
    }


@router.post(
    "/linked_accounts",
    operation_id="linkedAccountCreate",
    response_model=LinkedAccountRead,
    response_model_exclude_none=True,
    dependencies=[CallerIdempotent],
    responses={**conflicts(*CREATE_CONFLICTS), **STEP_UP_RESPONSES},
)
async def linked_account_create(
    body: LinkedAccountCreate, session: StepUpRequired
) -> dict[str, Any]:
    """Links an account of the caller's identity at another bank, in one of three forms of
    `accountReference`: an IBAN (EUR unless `currency` says GBP), a UK account number and sort
    code (GBP), or a descriptor. The identity must be approved and hold an active managed
    account with its IBAN; `type` is `BUSINESS` for a corporate, `PERSONAL` for a consumer; at
    most 20 accounts not removed. The answer is `PENDING_VERIFICATION`: its verification run
    (`GET /linked_accounts/{id}/verifications`) says what the identity must do. The root user
    confirms the declaration with `POST /challenges/otp/{channel}` (`resourceType`
    `linked_account_declaration`); the identity wires the instruction's amount with its
    `reference` to the named account (in the sandbox, a simulated deposit with that
    `reference`); the internal checks are the sandbox simulator's
    (`POST /simulate/api/linked_accounts/{id}/verify`). Then it is `ACTIVE`."""
    account = await service.create(session.ctx, owner(session), body)
    return account_body(account)


@router.get(
    "/linked_accounts/{id}",
    operation_id="linkedAccountGet",
    response_model=LinkedAccountRead,
    response_model_exclude_none=True,
    responses={**STEP_UP_RESPONSES, **MISSING},
)
async def linked_account_get(id: LinkedAccountId, session: StepUpRequired) -> dict[str, Any]:
    return account_body(await service.load(session.ctx, session.identity_id, id))


@router.patch(
    "/linked_accounts/{id}",
    operation_id="linkedAccountUpdate",
    response_model=LinkedAccountRead,
    response_model_exclude_none=True,
    responses={**STEP_UP_RESPONSES, **MISSING, **conflicts("LINKED_ACCOUNT_REMOVED")},
)
async def linked_account_update(
    id: LinkedAccountId, body: LinkedAccountUpdate, session: StepUpRequired
) -> dict[str, Any]:
    """Changes `tag` and `friendlyName`, those sent; a removed account is 409."""
    account = await service.load(session.ctx, session.identity_id, id, lock=True)
    changes = {name: getattr(body, name) for name in body.model_fields_set}
    await service.update(session.ctx, account, changes)
    return account_body(account)


@router.post(
    "/linked_accounts/{id}/remove",
    operation_id="linkedAccountRemove",
    status_code=204,
    response_class=Response,
    responses={
        **MISSING,
        **conflicts(
            "LINKED_ACCOUNT_ALREADY_REMOVED",
            "LINKED_ACCOUNT_HAS_PENDING_ACTIONS",
            "LINKED_ACCOUNT_REJECTED",
        ),
    },
)
async def linked_account_remove(id: LinkedAccountId, session: LoggedIn) -> Response:
    """`REMOVED`, for good (it can still be read). A rejected account stays as it is; one a
    wire transfer not yet ended pays is `LINKED_ACCOUNT_HAS_PENDING_ACTIONS`."""
    ctx = session.ctx
    account = await service.load(ctx, session.identity_id, id, lock=True)
    if await payments_repo.open_to_linked_account(ctx.db, ctx.programme.id, account.id):
        raise Conflict("LINKED_ACCOUNT_HAS_PENDING_ACTIONS")
    await service.remove(ctx, account)
    return Response(status_code=204)


@router.post(
    "/linked_accounts/{id}/block",
    operation_id="linkedAccountBlock",
    status_code=204,
    response_class=Response,
    dependencies=[CallerIdempotent],
    responses={
        **MISSING,
        **conflicts(
            "LINKED_ACCOUNT_INACTIVE", "LINKED_ACCOUNT_ALREADY_BLOCKED", "LINKED_ACCOUNT_REMOVED"
        ),
    },
)
async def linked_account_block(id: LinkedAccountId, session: LoggedIn) -> Response:
    """`ACTIVE` → `BLOCKED`; one still verifying or rejected is `LINKED_ACCOUNT_INACTIVE`."""
    account = await service.load(session.ctx, session.identity_id, id, lock=True)
    await service.block(session.ctx, account)
    return Response(status_code=204)


@router.post(
    "/linked_accounts/{id}/unblock",
    operation_id="linkedAccountUnblock",
    status_code=204,
    response_class=Response,
    dependencies=[CallerIdempotent],
    responses={
        **MISSING,
        **conflicts(
            "LINKED_ACCOUNT_INACTIVE", "LINKED_ACCOUNT_NOT_BLOCKED", "LINKED_ACCOUNT_REMOVED"
        ),
    },
)
async def linked_account_unblock(id: LinkedAccountId, session: LoggedIn) -> Response:
    """`BLOCKED` → `ACTIVE`."""
    account = await service.load(session.ctx, session.identity_id, id, lock=True)
    await service.unblock(session.ctx, account)
    return Response(status_code=204)


@router.get(
    "/linked_accounts/{id}/verifications",
    operation_id="linkedAccountVerificationsGet",
    response_model=VerificationRunsPage,
    response_model_exclude_none=True,
    responses={**STEP_UP_RESPONSES, **MISSING},
)
async def linked_account_verifications_get(
    id: LinkedAccountId,
    session: StepUpRequired,
    offset: Offset = 0,
    limit: Limit = None,
    state: Annotated[list[RunStateValue] | None, Query()] = None,
) -> dict[str, Any]:
    """The account's verification runs, newest first, each with its steps: the transfer
    instruction's `details` say what to wire (`amount`), with which `reference`, to which
    account (`destination`)."""
    account = await service.load(session.ctx, session.identity_id, id)
    total, views = await service.runs(session.ctx, account, state or (), offset, limit)
    return {
        "verificationRuns": [
            {
                "id": str(v.run.id),
                "state": v.run.state,
                "completedTimestamp": v.run.completed_at,
                "overriddenReason": v.run.overridden_reason,
                "verificationSteps": [
                    {
                        "step": s.step,
                        "status": s.status,
                        "details": s.details,
                        "completedTimestamp": s.completed_at,
                    }
                    for s in v.steps
                ],
            }
            for v in views
        ],
        "count": total,
        "responseCount": len(views),
    }
