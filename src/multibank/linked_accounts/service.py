"""Linked accounts (v3.63.md §4, D39, D45): create with the 409s of D39 in their order, read,
update, block, unblock, remove, and the verification that takes a new account from
`PENDING_VERIFICATION` to `ACTIVE` or `REJECTED`.

A new account has one run `PENDING` of three steps: the root user's declaration (a batch
challenge, `payments.batch_sca` calls `awaiting_declaration` and `declaration_passed`), the
transfer instruction (a deposit into the named managed account with its reference:
`transfer_arrived`), and the internal checks (the sandbox simulator's `verify`). When every
step is `COMPLETED` the run is `VERIFIED` and the account `ACTIVE`; a step `REJECTED` rejects
both. The simulator's `set` decides a run at once (`overriddenReason` `SIMULATOR`)."""

from __future__ import annotations

import secrets
import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select

from multibank.accounts.models import ManagedAccount
from multibank.identities.models import CORPORATE, Identity
from multibank.identities.service import holder_names, is_verified
from multibank.kernel.errors import BadRequest, Conflict, NotFound
from multibank.kernel.ids import new_id
from multibank.kernel.validation import is_country, parse_id
from multibank.linked_accounts import events
from multibank.linked_accounts import repository as repo
from multibank.linked_accounts.models import (
    ACTIVE,
    BLOCKED,
    COMPLETED,
    DECLARATION,
    INTERNAL_CHECKS,
    PENDING_REVIEW,
    PENDING_USER,
    PENDING_VERIFICATION,
    REJECTED,
    REMOVED,
    RUN_PENDING,
    RUN_REJECTED,
    RUN_VERIFIED,
    STEP_REJECTED,
    STEPS,
    TRANSFER_INSTRUCTION,
    LinkedAccount,
    VerificationRun,
    VerificationStep,
)
from multibank.linked_accounts.schemas import AccountReferenceWrite, LinkedAccountCreate
from multibank.programmes import repository as programmes
from multibank.programmes.context import Ctx
from multibank.programmes.models import LINKED_ACCOUNTS_KIND, Profile

MAX_PAGE = 100
# D45: at most this many accounts not `REMOVED` per identity.
MAX_KEPT = 20
# The transfer instruction (D39): one minor unit, with a reference the deposit must carry.
INSTRUCTION_AMOUNT = 1
REFERENCE_PREFIX = "LINK-"
_REFERENCE_ALPHABET = string.ascii_uppercase + string.digits
SIMULATOR = "SIMULATOR"


@dataclass(frozen=True)
class Owner:
    identity_id: int
    identity_type: str


# Create (D39's rules, in their order).


async def _profile(ctx: Ctx, profile_id: str | None) -> Profile:
    """The programme's linked-account profile (`profileId` may be left out)."""
    kinds = [
        p
        for p in await programmes.list_profiles(ctx.db, ctx.programme.id)
        if p.kind == LINKED_ACCOUNTS_KIND
    ]
    if profile_id is None:
        if not kinds:
            raise Conflict("PROFILE_NOT_FOUND")
        profile = kinds[0]
    else:
        number = parse_id(profile_id)
        found = [p for p in kinds if p.id == number]
        if not found:
            raise Conflict("PROFILE_NOT_FOUND")
        profile = found[0]
    if not profile.active:
        raise Conflict("PROFILE_INACTIVE")
    return profile


async def _holder(ctx: Ctx, owner: Owner) -> list[ManagedAccount]:
    """The identity, locked (its creates one at a time: the limit and the duplicates hold), and
    its managed accounts with an IBAN; MANAGED_ACCOUNT_MISSING unless approved with one."""
    stmt = (
        select(Identity)
        .where(Identity.programme_id == ctx.programme.id, Identity.id == owner.identity_id)
        .with_for_update()
    )
    identity = (await ctx.db.execute(stmt)).scalar_one_or_none()
    if identity is None or not is_verified(identity):
        raise Conflict("MANAGED_ACCOUNT_MISSING")
    accounts = list(await repo.iban_accounts(ctx.db, ctx.programme.id, owner.identity_id))
    if not accounts:
        raise Conflict("MANAGED_ACCOUNT_MISSING")
    return accounts


def reference_form(ref: AccountReferenceWrite) -> tuple[str, dict[str, str], str]:
    """(form, the reference as kept, its normal key): `IBAN`, `UK` or `DESCRIPTOR`; the 409s
    of a reference with none, or more than one, of the forms (D39)."""
    if ref.iban is not None and ref.accountNumber is not None:
        raise Conflict("ACCOUNT_NUMBER_AND_IBAN_PROVIDED")
    if ref.iban is not None and ref.sortCode is not None:
        raise Conflict("SORT_CODE_AND_IBAN_PROVIDED")
    if ref.accountNumber is not None and ref.sortCode is None:
        raise Conflict("SORT_CODE_MISSING")
    if ref.sortCode is not None and ref.accountNumber is None:
        raise Conflict("ACCOUNT_NUMBER_MISSING")
    if ref.iban is not None:
        kept = {"iban": ref.iban}
        if ref.bankIdentifierCode is not None:
            kept["bankIdentifierCode"] = ref.bankIdentifierCode
        return "IBAN", kept, f"IBAN:{ref.iban}"
    if ref.accountNumber is not None and ref.sortCode is not None:
        kept = {"accountNumber": ref.accountNumber, "sortCode": ref.sortCode}
        if ref.secondaryReference is not None:
            kept["secondaryReference"] = ref.secondaryReference
        return "UK", kept, f"UK:{ref.sortCode}:{ref.accountNumber}"
    if ref.accountDescriptor is None:
        raise Conflict("NO_ACCOUNT_DETAILS_PROVIDED")
    descriptor = ref.accountDescriptor.strip()
    if not descriptor:
        raise Conflict("ACCOUNT_DESCRIPTOR_MISSING")
    return "DESCRIPTOR", {"accountDescriptor": descriptor}, f"DESC:{descriptor}"[:120]


def _currency(data: LinkedAccountCreate, form: str, profile: Profile) -> str:
    """`currency` if sent, else EUR for an IBAN (and a descriptor), GBP for an account number;
    an account number is for GBP only."""
    currency = data.currency or ("GBP" if form == "UK" else "EUR")
    if form == "UK" and currency != "GBP":
        raise Conflict("IBAN_MISSING")
    if currency not in profile.currencies:
        raise Conflict("CURRENCY_NOT_SUPPORTED_BY_PROFILE")
    return currency


async def create(ctx: Ctx, owner: Owner, data: LinkedAccountCreate) -> LinkedAccount:
    """A new account `PENDING_VERIFICATION`, with its first verification run (event
    PENDING_VERIFICATION)."""
    profile = await _profile(ctx, data.profileId)
    managed = await _holder(ctx, owner)
    if data.type != ("BUSINESS" if owner.identity_type == CORPORATE else "PERSONAL"):
        raise Conflict("INVALID_IDENTITY_TYPE")
    ref = data.accountReference
    form, kept, key = reference_form(ref)
    currency = _currency(data, form, profile)
    if not is_country(data.country):
        raise Conflict("COUNTRY_NOT_SUPPORTED_BY_PROFILE")
    if form != "DESCRIPTOR" and await repo.is_managed_account(
        ctx.db, kept.get("iban"), kept.get("sortCode"), kept.get("accountNumber")
    ):
        raise Conflict("THIS_IS_A_MANAGED_ACCOUNT")
    if await repo.already_linked(ctx.db, ctx.programme.id, owner.identity_id, key):
        raise Conflict("LINKED_ACCOUNT_ALREADY_ADDED")
    if await repo.count_kept(ctx.db, ctx.programme.id, owner.identity_id) >= MAX_KEPT:
        raise Conflict("MODEL_CONSTRAINTS_VIOLATED")
    account = LinkedAccount(
        id=new_id(),
        programme_id=ctx.programme.id,
        identity_id=owner.identity_id,
        identity_type=owner.identity_type,
        profile_id=profile.id,
        tag=data.tag,
        friendly_name=data.friendlyName,
        name=data.name,
        type=data.type,
        country=data.country,
        currency=currency,
        account_reference=kept,
        reference_key=key,
        state=PENDING_VERIFICATION,
        created_at=ctx.now,
    )
    ctx.db.add(account)
    await ctx.db.flush()
    await _new_run(ctx, account, _destination(managed, currency))
    await events.changed(ctx, PENDING_VERIFICATION, account)
    return account


def _destination(managed: Sequence[ManagedAccount], currency: str) -> ManagedAccount:
    """The identity's oldest managed account with an IBAN in `currency`, else its oldest."""
    return next((a for a in managed if a.currency == currency), managed[0])


def _new_reference() -> str:
    return REFERENCE_PREFIX + "".join(secrets.choice(_REFERENCE_ALPHABET) for _ in range(8))


async def _new_run(ctx: Ctx, account: LinkedAccount, destination: ManagedAccount) -> None:
    run = VerificationRun(
        id=new_id(),
        programme_id=ctx.programme.id,
        linked_account_id=account.id,
        state=RUN_PENDING,
        created_at=ctx.now,
    )
    ctx.db.add(run)
    owner_name = (await holder_names(ctx, [account.identity_id])).get(account.identity_id)
    if destination.currency == "GBP" and destination.account_number and destination.sort_code:
        where = {"accountNumber": destination.account_number, "sortCode": destination.sort_code}
    else:
        where = {"iban": destination.iban or "", "bankIdentifierCode": destination.bic or ""}
    reference = _new_reference()
    instruction = {
        "amount": {"currency": account.currency, "amount": INSTRUCTION_AMOUNT},
        "reference": reference,
        "destination": {
            "accountOwnerName": owner_name[1] if owner_name else "",
            "accountType": account.type,
            "accountReference": where,
        },
    }
    for step, status, details, ref in (
        (DECLARATION, PENDING_USER, None, None),
        (TRANSFER_INSTRUCTION, PENDING_USER, instruction, reference),
        (INTERNAL_CHECKS, PENDING_REVIEW, None, None),
    ):
        ctx.db.add(
            VerificationStep(
                id=new_id(),
                programme_id=ctx.programme.id,
                run_id=run.id,
                step=step,
                status=status,
                details=details,
                reference=ref,
            )
        )
    await ctx.db.flush()


# Reads and changes by the owner.


async def load(ctx: Ctx, identity_id: int, account_id: str, lock: bool = False) -> LinkedAccount:
    """The identity's account; 404 for an unknown id or another identity's."""
    number = parse_id(account_id)
    account = (
        None
        if number is None
        else await repo.get(ctx.db, ctx.programme.id, identity_id, number, lock)
    )
    if account is None:
        raise NotFound("Linked account not found")
    return account


async def page(
    ctx: Ctx, identity_id: int, filters: repo.Filters, offset: int, limit: int | None
) -> tuple[int, Sequence[LinkedAccount]]:
    size = min(limit or MAX_PAGE, MAX_PAGE)
    return await repo.page(ctx.db, ctx.programme.id, identity_id, filters, offset, size)


async def update(ctx: Ctx, account: LinkedAccount, changes: dict[str, Any]) -> None:
    """Only `tag` and `friendlyName`, those sent; a `REMOVED` account is 409."""
    if account.state == REMOVED:
        raise Conflict("LINKED_ACCOUNT_REMOVED")
    if "tag" in changes:
        account.tag = changes["tag"]
    if "friendlyName" in changes:
        account.friendly_name = changes["friendlyName"]


async def block(ctx: Ctx, account: LinkedAccount) -> None:
    if account.state == REMOVED:
        raise Conflict("LINKED_ACCOUNT_REMOVED")
    if account.state == BLOCKED:
        raise Conflict("LINKED_ACCOUNT_ALREADY_BLOCKED")
    if account.state != ACTIVE:
        raise Conflict("LINKED_ACCOUNT_INACTIVE")
    account.state = BLOCKED
    await events.changed(ctx, "BLOCKED", account)


async def unblock(ctx: Ctx, account: LinkedAccount) -> None:
    if account.state == REMOVED:
        raise Conflict("LINKED_ACCOUNT_REMOVED")
    if account.state == ACTIVE:
        raise Conflict("LINKED_ACCOUNT_NOT_BLOCKED")
    if account.state != BLOCKED:
        raise Conflict("LINKED_ACCOUNT_INACTIVE")
    account.state = ACTIVE
    await events.changed(ctx, "UNBLOCKED", account)


async def remove(ctx: Ctx, account: LinkedAccount) -> None:
    """Final. (`LINKED_ACCOUNT_HAS_PENDING_ACTIONS`, a wire transfer to it not yet ended, is
    the route's check: payments sit above this slice.)"""
    if account.state == REMOVED:
        raise Conflict("LINKED_ACCOUNT_ALREADY_REMOVED")
    if account.state == REJECTED:
        raise Conflict("LINKED_ACCOUNT_REJECTED")
    account.state = REMOVED
    await events.changed(ctx, "REMOVED", account)


@dataclass(frozen=True)
class RunView:
    run: VerificationRun
    steps: list[VerificationStep]


async def runs(
    ctx: Ctx, account: LinkedAccount, states: Sequence[str], offset: int, limit: int | None
) -> tuple[int, list[RunView]]:
    """The account's verification runs, newest first, each with its steps in D39's order."""
    size = min(limit or MAX_PAGE, MAX_PAGE)
    total, rows = await repo.runs(ctx.db, account.id, states, offset, size)
    steps = await repo.steps_of(ctx.db, [r.id for r in rows])
    order = {name: i for i, name in enumerate(STEPS)}
    views = [
        RunView(
            r, sorted((s for s in steps if s.run_id == r.id), key=lambda s: order.get(s.step, 9))
        )
        for r in rows
    ]
    return total, views


# Verification.


async def _pending_run(
    ctx: Ctx, account: LinkedAccount
) -> tuple[VerificationRun, list[VerificationStep]]:
    run = await repo.latest_run(ctx.db, account.id)
    if run is None:  # never: every account is made with its run
        raise NotFound("Verification run not found")
    return run, list(await repo.steps_of(ctx.db, [run.id]))


async def _settle(
    ctx: Ctx, account: LinkedAccount, run: VerificationRun, steps: Sequence[VerificationStep]
) -> None:
    """The run and the account decided once a step is `REJECTED` or all are `COMPLETED`."""
    if run.state != RUN_PENDING or account.state != PENDING_VERIFICATION:
        return
    if any(s.status == STEP_REJECTED for s in steps):
        await _decide(ctx, account, run, RUN_REJECTED)
    elif steps and all(s.status == COMPLETED for s in steps):
        await _decide(ctx, account, run, RUN_VERIFIED)


async def _decide(
    ctx: Ctx, account: LinkedAccount, run: VerificationRun, state: str, reason: str | None = None
) -> None:
    run.state = state
    run.completed_at = ctx.now
    run.overridden_reason = reason
    account.state = ACTIVE if state == RUN_VERIFIED else REJECTED
    await events.changed(ctx, "VERIFIED" if state == RUN_VERIFIED else "REJECTED", account)


def _complete(ctx: Ctx, step: VerificationStep, status: str = COMPLETED) -> None:
    step.status = status
    step.completed_at = ctx.now


async def awaiting_declaration(
    ctx: Ctx, identity_id: int, ids: Sequence[str], *, refuse_state: bool = False
) -> list[LinkedAccount]:
    """The identity's accounts named, locked in id order, each still verifying with its
    declaration step `PENDING_USER`. NotFound for any id that is not the identity's; one whose
    declaration does not await the user is NotFound too, or with `refuse_state` 409
    `STATE_INVALID` (D37's answer)."""
    found = []
    for number in sorted({parse_id(i) or 0 for i in ids}):
        account = (
            None
            if number <= 0
            else await repo.get(ctx.db, ctx.programme.id, identity_id, number, lock=True)
        )
        if account is None:
            raise NotFound("Linked account not found")
        found.append(account)
    for account in found:
        if not await _declaration_awaited(ctx, account):
            if refuse_state:
                raise Conflict("STATE_INVALID")
            raise NotFound("Linked account not found")
    return found


async def _declaration_awaited(ctx: Ctx, account: LinkedAccount) -> bool:
    if account.state != PENDING_VERIFICATION:
        return False
    run, steps = await _pending_run(ctx, account)
    return run.state == RUN_PENDING and any(
        s.step == DECLARATION and s.status == PENDING_USER for s in steps
    )


async def declaration_passed(ctx: Ctx, linked_account: LinkedAccount) -> None:
    """The root user passed the declaration's challenge: the step is `COMPLETED` (and the run
    decided if it was the last). Nothing happens to an account no longer awaiting it."""
    await _steps_done(ctx, linked_account, (DECLARATION,), COMPLETED)


async def _steps_done(ctx: Ctx, account: LinkedAccount, names: Sequence[str], status: str) -> None:
    if account.state != PENDING_VERIFICATION:
        return
    run, steps = await _pending_run(ctx, account)
    if run.state != RUN_PENDING:
        return
    for s in steps:
        if s.step in names and s.status != status:
            _complete(ctx, s, status)
    await _settle(ctx, account, run, steps)


async def transfer_arrived(ctx: Ctx, managed_account: ManagedAccount, reference: str) -> None:
    """A deposit reached `managed_account` with `reference`: the transfer instruction of each
    account still verifying that names this account and reference is `COMPLETED`."""
    if not reference.startswith(REFERENCE_PREFIX):
        return
    for account, step in await repo.awaiting_transfer(ctx.db, ctx.programme.id, reference):
        destination = (step.details or {}).get("destination") or {}
        where = destination.get("accountReference") or {}
        if (where.get("iban") and where["iban"] == managed_account.iban) or (
            where.get("accountNumber")
            and where["accountNumber"] == managed_account.account_number
            and where.get("sortCode") == managed_account.sort_code
        ):
            await _steps_done(ctx, account, (TRANSFER_INSTRUCTION,), COMPLETED)


# The simulator (D42).


async def _simulated(ctx: Ctx, account_id: int) -> LinkedAccount:
    account = await repo.get(ctx.db, ctx.programme.id, None, account_id, lock=True)
    if account is None:
        raise NotFound("Linked account not found")
    return account


def _already(account: LinkedAccount) -> Conflict:
    return Conflict("ALREADY_REJECTED" if account.state == REJECTED else "ALREADY_COMPLETED")


async def simulate_set(ctx: Ctx, account_id: int, state: str) -> None:
    """Decides the account's run at once: `VERIFIED` or `REJECTED`, `overriddenReason`
    `SIMULATOR`. An account no longer verifying is 409."""
    account = await _simulated(ctx, account_id)
    if account.state != PENDING_VERIFICATION:
        raise _already(account)
    run, _ = await _pending_run(ctx, account)
    await _decide(
        ctx, account, run, RUN_VERIFIED if state == RUN_VERIFIED else RUN_REJECTED, SIMULATOR
    )


async def simulate_verify(ctx: Ctx, account_id: int, names: Sequence[str], result: str) -> None:
    """The steps named end with `result` (`COMPLETED` or `REJECTED`); a step the run does not
    have is 400, a decided run 409."""
    account = await _simulated(ctx, account_id)
    if account.state != PENDING_VERIFICATION:
        raise _already(account)
    run, steps = await _pending_run(ctx, account)
    if run.state != RUN_PENDING:
        raise _already(account)
    have = {s.step for s in steps}
    for name in names:
        if name not in have:
            raise BadRequest(
                f"request.steps: the run has no step {name}",
                [{"fieldName": "steps", "error": "IN", "params": sorted(have)}],
            )
    await _steps_done(ctx, account, names, COMPLETED if result == COMPLETED else STEP_REJECTED)
