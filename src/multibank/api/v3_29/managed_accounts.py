"""Managed accounts tag (3.29.1): create, list, get, update, IBAN, block and unblock."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import Path, Query, Request, Response
from pydantic import StringConstraints

from multibank.accounts import repository, service
from multibank.accounts.models import ManagedAccount
from multibank.accounts.schemas import (
    ManagedAccountCreate,
    ManagedAccountIban,
    ManagedAccountRead,
    ManagedAccountsPage,
    ManagedAccountUpdate,
)
from multibank.api.answers import Answer
from multibank.api.deps import (
    STEP_UP_RESPONSES,
    CallerIdempotent,
    LoggedIn,
    Session,
    StepUpRequired,
    conflicts,
)
from multibank.api.query_filters import ObjectFilter, QueryFilters
from multibank.api.routing import UnitOfWorkRouter
from multibank.identities import service as identities
from multibank.kernel.vocabulary import Currency, Tag
from multibank.ledger.models import LedgerAccount

router = UnitOfWorkRouter(tags=["Managed Accounts"])
AccountId = Annotated[str, Path(pattern=r"^[0-9]+$")]
StateValue = Annotated[str, Query(pattern="^(ACTIVE|BLOCKED|DESTROYED)$")]
# The pattern goes on the items: on the list itself it is a TypeError (500) at request time.
BlockedReasonValue = Annotated[str, Query(pattern="^(USER|SYSTEM|LOST)$")]
DestroyedReasonValue = Annotated[str, Query(pattern="^(SYSTEM|USER|LOST|STOLEN|EXPIRED)$")]
# `state.blockedReason` and `state.destroyedReason` are the interface's (literal, dotted)
# parameters; `state[blockedReason]` is the same filter as a client that sends objects in the
# deepObject style spells it, and any other `state.…`, `state[…]` or `foo[bar]` key is a 400.
ACCOUNT_QUERY = QueryFilters(
    ObjectFilter(
        "state",
        {
            "blockedReason": list[
                Annotated[str, StringConstraints(pattern="^(USER|SYSTEM|LOST)$")]
            ],
            "destroyedReason": list[
                Annotated[str, StringConstraints(pattern="^(SYSTEM|USER|LOST|STOLEN|EXPIRED)$")]
            ],
        },
        dotted_declared=True,
    )
)
# The hot reads' answers, written from the dicts below, not validated again (api/answers.py).
ACCOUNT = Answer(ManagedAccountRead)
PAGE = Answer(ManagedAccountsPage)
CREATE_CONFLICTS = (
    "PROFILE_NOT_FOUND",
    "PROFILE_INACTIVE",
    "CURRENCY_NOT_SUPPORTED_BY_PROFILE",
    "OWNER_IDENTITY_NOT_VERIFIED",
)


def owner(session: Session) -> service.Owner:
    return service.Owner(session.auth.identity_id, session.auth.identity_type)


def account_body(
    account: ManagedAccount | repository.AccountView,
    ledger_account: LedgerAccount | repository.AccountView,
) -> dict[str, Any]:
    """`ledger_account` holds the balances: the ledger row, or the read's row itself."""
    state: dict[str, str] = {"state": account.state}
    if account.blocked_reason:
        state["blockedReason"] = account.blocked_reason
    if account.destroyed_reason:
        state["destroyedReason"] = account.destroyed_reason
    # `ManagedAccountRead`'s fields, none None.
    body: dict[str, Any] = {"id": str(account.id), "profileId": str(account.profile_id)}
    if account.tag is not None:
        body["tag"] = account.tag
    body["friendlyName"] = account.friendly_name
    body["currency"] = account.currency
    body["balances"] = service.balances_of(ledger_account)
    body["state"] = state
    body["creationTimestamp"] = account.created_at
    return body


# Over 8 parameters: each of the interface's filters is a query parameter of its own.
@router.get(
    "/managed_accounts",
    operation_id="managedAccountsGet",
    response_model=ManagedAccountsPage,
    response_model_exclude_none=True,
    responses=STEP_UP_RESPONSES,
)
async def managed_accounts_get(
    request: Request,
    session: StepUpRequired,
    offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
    limit: Annotated[int | None, Query(ge=1, le=2**31 - 1)] = None,
    profileId: Annotated[str | None, Query(pattern=r"^[0-9]+$", max_length=19)] = None,
    friendlyName: Annotated[str | None, Query(min_length=1, max_length=50)] = None,
    state: Annotated[list[StateValue] | None, Query()] = None,
    blocked_reason: Annotated[
        list[BlockedReasonValue] | None, Query(alias="state.blockedReason")
    ] = None,
    destroyed_reason: Annotated[
        list[DestroyedReasonValue] | None, Query(alias="state.destroyedReason")
    ] = None,
    currency: Annotated[Currency | None, Query()] = None,
    createdFrom: Annotated[int | None, Query(ge=0, le=2**63 - 1)] = None,
    createdTo: Annotated[int | None, Query(ge=0, le=2**63 - 1)] = None,
    tag: Annotated[Tag | None, Query()] = None,
) -> Response:
    """The caller's identity's accounts, filtered; repeated keys for the array filters
    (`?state=ACTIVE&state=BLOCKED`); pages of at most 100. `state[blockedReason]` and
    `state[destroyedReason]` are read as `state.blockedReason` and `state.destroyedReason`; a
    query key shaped like a filter that this list does not have (`state.foo`, `foo[bar]`) is a
    400, never ignored."""
    blocked: Sequence[str] = blocked_reason or ()
    destroyed: Sequence[str] = destroyed_reason or ()
    spelled = ACCOUNT_QUERY.read(request).get("state")
    if spelled:  # (a page without them keeps the empty tuples `Filters.empty` looks for)
        blocked = [*blocked, *spelled.get("blockedReason", ())]
        destroyed = [*destroyed, *spelled.get("destroyedReason", ())]
    filters = repository.Filters(
        profile_id=int(profileId) if profileId and int(profileId) < 2**63 else None,
        friendly_name=friendlyName,
        states=state or (),
        blocked_reasons=blocked,
        destroyed_reasons=destroyed,
        currency=currency,
        created_from=createdFrom,
        created_to=createdTo,
        tag=tag,
    )
    if profileId and int(profileId) >= 2**63:
        return PAGE.response({"accounts": [], "count": 0, "responseCount": 0})
    total, rows = await service.page(session.ctx, owner(session), filters, offset, limit)
    return PAGE.response(
        {
            "accounts": [account_body(row, row) for row in rows],
            "count": total,
            "responseCount": len(rows),
        }
    )


@router.post(
    "/managed_accounts",
    operation_id="managedAccountCreate",
    response_model=ManagedAccountRead,
    response_model_exclude_none=True,
    dependencies=[CallerIdempotent],
    responses={**conflicts(*CREATE_CONFLICTS), **STEP_UP_RESPONSES},
)
async def managed_account_create(
    body: ManagedAccountCreate, session: StepUpRequired
) -> dict[str, Any]:
    """Opens an account in a currency of the owner type's managed-account profile; the owner's
    due diligence must be approved."""
    account = await service.create(session.ctx, owner(session), body)
    return account_body(*await service.load(session.ctx, owner(session), str(account.id)))


@router.get(
    "/managed_accounts/{id}",
    operation_id="managedAccountGet",
    response_model=ManagedAccountRead,
    response_model_exclude_none=True,
    responses=STEP_UP_RESPONSES,
)
async def managed_account_get(id: AccountId, session: StepUpRequired) -> Response:
    row = await service.view(session.ctx, owner(session), id)
    return ACCOUNT.response(account_body(row, row))


@router.patch(
    "/managed_accounts/{id}",
    operation_id="managedAccountUpdate",
    response_model=ManagedAccountRead,
    response_model_exclude_none=True,
    dependencies=[CallerIdempotent],
    responses=STEP_UP_RESPONSES,
)
async def managed_account_update(
    id: AccountId, body: ManagedAccountUpdate, session: StepUpRequired
) -> dict[str, Any]:
    """Changes only the fields sent."""
    row = await service.update_details(
        session.ctx, owner(session), id, body.tag, body.friendlyName, body.model_fields_set
    )
    return account_body(*row)


async def _beneficiary(session: Session) -> str:
    identity, root = await identities.load(
        session.ctx, session.auth.identity_id, session.auth.identity_type
    )
    return identities.holder_name(identity.company, root.name, root.surname)


@router.get(
    "/managed_accounts/{id}/iban",
    operation_id="managedAccountIBANGet",
    response_model=ManagedAccountIban,
    response_model_exclude_none=True,
)
async def managed_account_iban_get(id: AccountId, session: LoggedIn) -> dict[str, Any]:
    """UNALLOCATED until an upgrade; PENDING_ALLOCATION until the bank details are ready."""
    account, _ = await service.load(session.ctx, owner(session), id)
    return service.iban_body(account, await _beneficiary(session))


@router.post(
    "/managed_accounts/{id}/iban",
    operation_id="managedAccountsIBANUpgrade",
    response_model=ManagedAccountIban,
    response_model_exclude_none=True,
    dependencies=[CallerIdempotent],
    responses=conflicts(
        "INSTRUMENT_ALREADY_UPGRADED_TO_IBAN",
        "INSTRUMENT_IS_NOT_ACTIVE",
        "IBAN_NOT_SUPPORTED",
        "IBAN_ALREADY_REQUESTED",
        "OWNER_NOT_VERIFIED",
    ),
)
async def managed_account_iban_upgrade(id: AccountId, session: LoggedIn) -> dict[str, Any]:
    """Requests an IBAN; allocation completes after the programme's allocation delay."""
    account = await service.upgrade_iban(session.ctx, owner(session), id)
    return service.iban_body(account, await _beneficiary(session))


@router.post(
    "/managed_accounts/{id}/block",
    operation_id="managedAccountBlock",
    status_code=204,
    response_class=Response,
    dependencies=[CallerIdempotent],
    responses=conflicts("INSTRUMENT_ALREADY_BLOCKED", "INSTRUMENT_DESTROYED"),
)
async def managed_account_block(id: AccountId, session: LoggedIn) -> Response:
    """A temporary block by the user (reason USER), which the user can lift."""
    account, _ = await service.load(session.ctx, owner(session), id)
    await service.block(session.ctx, account, "USER")
    return Response(status_code=204)


@router.post(
    "/managed_accounts/{id}/unblock",
    operation_id="managedAccountUnblock",
    status_code=204,
    response_class=Response,
    dependencies=[CallerIdempotent],
    responses=conflicts("INSTRUMENT_INACTIVE", "INSTRUMENT_NOT_BLOCKED", "INSTRUMENT_DESTROYED"),
)
async def managed_account_unblock(id: AccountId, session: LoggedIn) -> Response:
    """Lifts a USER block; a SYSTEM block answers INSTRUMENT_INACTIVE."""
    account, _ = await service.load(session.ctx, owner(session), id)
    await service.unblock(session.ctx, account, by_operator=False)
    return Response(status_code=204)
