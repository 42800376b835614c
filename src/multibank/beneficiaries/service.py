"""Trusted beneficiaries (v3.63.md §2, D38, decision 0088).

A create batch validates each beneficiary in the request: valid ones wait for the batch's
challenge (`PENDING_CHALLENGE`), the others are `INVALID` with why; the batch waits if any is
valid and has `FAILED` otherwise, though the answer says `INITIALISED` (as observed). A remove
batch takes the `ACTIVE` ones named. One challenge per batch, by SMS code or push, started and
answered by one user of the identity: passed, the batch is `COMPLETED` and its beneficiaries
`ACTIVE` (create) or `REMOVED` (remove); failed (wrong codes past the limit, its 5 minutes up, a
push rejected), the batch is `CHALLENGE_FAILED` and so are its create beneficiaries, while a
remove batch's stay `ACTIVE`. Payments find an `ACTIVE` beneficiary with `payable`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, or_, select
from stdnum import iban as stdnum_iban

from multibank.accounts import repository as accounts
from multibank.beneficiaries import events
from multibank.beneficiaries.models import (
    ACTIVE,
    BANK,
    CHALLENGE_FAILED,
    COMPLETED,
    CREATE,
    FAILED,
    INSTRUMENT,
    INVALID,
    PENDING_CHALLENGE,
    REMOVE,
    REMOVED,
    Beneficiary,
    BeneficiaryBatch,
)
from multibank.beneficiaries.schemas import BasicBeneficiary, BeneficiaryBatchCreate
from multibank.cards import repository as cards
from multibank.factors import service as factors
from multibank.identities import service as identities
from multibank.kernel import codes, notify
from multibank.kernel.errors import BadRequest, Conflict, NotFound
from multibank.kernel.ids import new_id
from multibank.kernel.tokens import AuthSession
from multibank.kernel.validation import parse_id
from multibank.programmes.context import Ctx

CHALLENGE_TTL_MS = 5 * 60_000  # as a payment's (D13)
OTP_PURPOSE = "SCA_BENEFICIARIES"
MOST_ACTIVE = 500  # D45
SMS = "SMS"


def _subject(batch: BeneficiaryBatch) -> str:
    return f"beneficiaries:{batch.id}"


def _iban_checked(values: BeneficiaryBatchCreate) -> None:
    """An IBAN whose check digits fail is a 400, as a wire transfer's (D12)."""
    for i, b in enumerate(values.beneficiaries):
        details = b.beneficiaryDetails.bankAccountDetails
        if details is not None and details.iban and not stdnum_iban.is_valid(details.iban):
            field = f"beneficiaries[{i}].beneficiaryDetails.bankAccountDetails.iban"
            raise BadRequest(
                f"request.{field}: check digits do not verify",
                [{"fieldName": field, "error": "REGEX", "params": []}],
            )


def _name(b: BasicBeneficiary) -> str:
    info = b.beneficiaryInformation
    return (info.businessName or info.fullName or "").strip().casefold()


async def _instrument_failure(ctx: Ctx, owner_id: int, b: BasicBeneficiary) -> str | None:
    """Why an instrument beneficiary is invalid, or None: D38's rules."""
    ref = b.beneficiaryDetails.instrument
    assert ref is not None
    number = parse_id(ref.id)
    found: Any = None
    if number is not None:
        repo = accounts if ref.type == "managed_accounts" else cards
        found = await repo.get_in_programme(ctx.db, ctx.programme.id, number)
    if found is None or found.state == "DESTROYED" or found.identity_id is None:
        return "INSTRUMENT_DETAILS_NOT_FOUND"
    if found.identity_id == owner_id:
        return "BENEFICIARY_BELONGS_TO_SAME_IDENTITY"
    names = await identities.holder_names(ctx, [found.identity_id])
    holder = names.get(found.identity_id, ("", ""))[1]
    if holder.strip().casefold() != _name(b):
        return "INSTRUMENT_DETAILS_NOT_FOUND"
    return None


def _keys(b: BasicBeneficiary) -> dict[str, Any]:
    """What finds a duplicate and what a payment pays."""
    d = b.beneficiaryDetails
    if d.instrument is not None:
        return {
            "kind": INSTRUMENT,
            "instrument_type": d.instrument.type,
            "instrument_id": parse_id(d.instrument.id) or 0,
        }
    bank = d.bankAccountDetails
    assert bank is not None
    return {
        "kind": BANK,
        "iban": bank.iban,
        "account_number": bank.accountNumber,
        "sort_code": bank.sortCode,
    }


async def _taken(ctx: Ctx, owner_id: int, keys: dict[str, Any]) -> bool:
    """The same instrument or bank account among the identity's waiting or active ones."""
    stmt = select(func.count()).where(
        Beneficiary.programme_id == ctx.programme.id,
        Beneficiary.identity_id == owner_id,
        Beneficiary.state.in_((PENDING_CHALLENGE, ACTIVE)),
    )
    if keys["kind"] == INSTRUMENT:
        stmt = stmt.where(
            Beneficiary.instrument_type == keys["instrument_type"],
            Beneficiary.instrument_id == keys["instrument_id"],
        )
    elif keys["iban"]:
        stmt = stmt.where(Beneficiary.iban == keys["iban"])
    else:
        stmt = stmt.where(
            Beneficiary.account_number == keys["account_number"],
            Beneficiary.sort_code == keys["sort_code"],
        )
    return int((await ctx.db.execute(stmt)).scalar_one()) > 0


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    fields = ("kind", "instrument_type", "instrument_id", "iban", "account_number", "sort_code")
    return all(a.get(f) == b.get(f) for f in fields)


def _batch(
    ctx: Ctx, owner_id: int, operation: str, tag: str | None, state: str
) -> BeneficiaryBatch:
    return BeneficiaryBatch(
        id=new_id(),
        programme_id=ctx.programme.id,
        identity_id=owner_id,
        operation=operation,
        tag=tag,
        state=state,
        challenge_failures=0,
        created_at=ctx.now,
        updated_at=ctx.now,
    )


async def create(ctx: Ctx, owner_id: int, data: BeneficiaryBatchCreate) -> BeneficiaryBatch:
    """A create batch, its beneficiaries validated now; the caller answers it `INITIALISED`."""
    _iban_checked(data)
    batch = _batch(ctx, owner_id, CREATE, data.tag, FAILED)
    ctx.db.add(batch)
    made: list[Beneficiary] = []
    seen: list[dict[str, Any]] = []
    for b in data.beneficiaries:
        keys = _keys(b)
        failure = None
        if keys["kind"] == INSTRUMENT:
            failure = await _instrument_failure(ctx, owner_id, b)
        if failure is None and (
            any(_same(keys, s) for s in seen) or await _taken(ctx, owner_id, keys)
        ):
            failure = "BENEFICIARY_DETAILS_ALREADY_EXIST"
        if failure is None:
            seen.append(keys)
        made.append(
            Beneficiary(
                id=new_id(),
                programme_id=ctx.programme.id,
                identity_id=owner_id,
                batch_id=batch.id,
                batches=[{"batchId": str(batch.id), "operation": CREATE}],
                state=INVALID if failure else PENDING_CHALLENGE,
                validation_failure=failure,
                external_refs=b.externalRefs,
                group=b.group,
                information=b.beneficiaryInformation.model_dump(exclude_none=True),
                details=b.beneficiaryDetails.model_dump(exclude_none=True),
                created_at=ctx.now,
                updated_at=ctx.now,
                **keys,
            )
        )
    if seen:
        active = await _count_active(ctx, owner_id)
        if active + len(seen) > MOST_ACTIVE:
            raise Conflict("MODEL_CONSTRAINTS_VIOLATED")
        batch.state = PENDING_CHALLENGE
    ctx.db.add_all(made)
    await ctx.db.flush()
    await events.batch(ctx, batch, made, batch.state)
    return batch


async def _count_active(ctx: Ctx, owner_id: int) -> int:
    stmt = select(func.count()).where(
        Beneficiary.programme_id == ctx.programme.id,
        Beneficiary.identity_id == owner_id,
        Beneficiary.state.in_((PENDING_CHALLENGE, ACTIVE)),
    )
    return int((await ctx.db.execute(stmt)).scalar_one())


async def remove(ctx: Ctx, owner_id: int, ids: Sequence[str]) -> BeneficiaryBatch:
    """A remove batch of the `ACTIVE` beneficiaries named that no open remove batch holds; the
    others are left as they are. None such is 404 and makes nothing."""
    numbers = sorted({n for i in ids if (n := parse_id(i)) is not None})
    stmt = (
        select(Beneficiary)
        .where(
            Beneficiary.programme_id == ctx.programme.id,
            Beneficiary.identity_id == owner_id,
            Beneficiary.id.in_(numbers),
            Beneficiary.state == ACTIVE,
            Beneficiary.remove_batch_id.is_(None),
        )
        .order_by(Beneficiary.id)
        .with_for_update()
    )
    found = list((await ctx.db.execute(stmt)).scalars())
    if not found:
        raise NotFound("Beneficiary not found")
    batch = _batch(ctx, owner_id, REMOVE, None, PENDING_CHALLENGE)
    ctx.db.add(batch)
    for b in found:
        b.remove_batch_id = batch.id
        b.batches = [*b.batches, {"batchId": str(batch.id), "operation": REMOVE}]
        b.updated_at = ctx.now
    await ctx.db.flush()
    await events.batch(ctx, batch, found, batch.state)
    return batch


# Reads


async def batch_of(ctx: Ctx, owner_id: int, batch_id: str, lock: bool = False) -> BeneficiaryBatch:
    number = parse_id(batch_id)
    stmt = select(BeneficiaryBatch).where(
        BeneficiaryBatch.programme_id == ctx.programme.id,
        BeneficiaryBatch.identity_id == owner_id,
        BeneficiaryBatch.id == (number or 0),
    )
    row = (await ctx.db.execute(stmt.with_for_update() if lock else stmt)).scalar_one_or_none()
    if row is None:
        raise NotFound("Beneficiary batch not found")
    return row


async def get(ctx: Ctx, owner_id: int, beneficiary_id: str) -> Beneficiary:
    number = parse_id(beneficiary_id)
    stmt = select(Beneficiary).where(
        Beneficiary.programme_id == ctx.programme.id,
        Beneficiary.identity_id == owner_id,
        Beneficiary.id == (number or 0),
    )
    row = (await ctx.db.execute(stmt)).scalar_one_or_none()
    if row is None:
        raise NotFound("Beneficiary not found")
    return row


@dataclass(frozen=True)
class Page:
    offset: int
    limit: int


async def page(
    ctx: Ctx,
    owner_id: int,
    at: Page,
    batch_ids: Sequence[str] = (),
    groups: Sequence[str] = (),
) -> tuple[int, list[Beneficiary]]:
    stmt = select(Beneficiary).where(
        Beneficiary.programme_id == ctx.programme.id, Beneficiary.identity_id == owner_id
    )
    if batch_ids:
        wanted = [n for i in batch_ids if (n := parse_id(i)) is not None]
        stmt = stmt.where(
            or_(Beneficiary.batch_id.in_(wanted), Beneficiary.remove_batch_id.in_(wanted))
        )
    if groups:
        stmt = stmt.where(Beneficiary.group.in_(list(groups)))
    return await _paged(ctx, stmt, Beneficiary, at)


async def batches(
    ctx: Ctx,
    owner_id: int,
    at: Page,
    states: Sequence[str] = (),
    operations: Sequence[str] = (),
    tags: Sequence[str] = (),
) -> tuple[int, list[BeneficiaryBatch]]:
    stmt = select(BeneficiaryBatch).where(
        BeneficiaryBatch.programme_id == ctx.programme.id,
        BeneficiaryBatch.identity_id == owner_id,
    )
    if states:
        stmt = stmt.where(BeneficiaryBatch.state.in_(list(states)))
    if operations:
        stmt = stmt.where(BeneficiaryBatch.operation.in_(list(operations)))
    if tags:
        stmt = stmt.where(BeneficiaryBatch.tag.in_(list(tags)))
    return await _paged(ctx, stmt, BeneficiaryBatch, at)


async def _paged(ctx: Ctx, stmt: Any, entity: Any, at: Page) -> tuple[int, list[Any]]:
    total = (await ctx.db.execute(select(func.count()).select_from(stmt.subquery()))).scalar_one()
    ordered = stmt.order_by(entity.created_at.desc(), entity.id.desc())
    rows = (await ctx.db.execute(ordered.offset(at.offset).limit(at.limit))).scalars().all()
    return int(total), list(rows)


# The batch's challenge


def _can_start(batch: BeneficiaryBatch) -> None:
    """Only a waiting batch, and one challenge: a second start is refused (as observed)."""
    if batch.state != PENDING_CHALLENGE or batch.challenge_channel is not None:
        raise Conflict("STATE_INVALID")


def _started(ctx: Ctx, batch: BeneficiaryBatch, auth: AuthSession, channel: str) -> None:
    batch.challenge_channel = channel
    batch.challenge_user_id = auth.user_id
    batch.challenge_started_at = ctx.now
    batch.updated_at = ctx.now


async def start_otp(ctx: Ctx, auth: AuthSession, batch_id: str) -> None:
    batch = await batch_of(ctx, auth.identity_id, batch_id, lock=True)
    _can_start(batch)
    mobile = await factors.registered_mobile(ctx, auth)
    issued = await ctx.issue_code(_subject(batch), OTP_PURPOSE, ttl_ms=CHALLENGE_TTL_MS)
    what = "add" if batch.operation == CREATE else "remove"
    await notify.record(
        ctx.db,
        programme_id=ctx.programme.id,
        sandbox=ctx.sandbox,
        channel="SMS",
        recipient=mobile,
        subject="Trusted beneficiaries",
        body=f"Your code to {what} trusted beneficiaries is {issued.code}. It expires in 5 "
        "minutes.",
        now_ms=ctx.now,
    )
    _started(ctx, batch, auth, SMS)
    await ctx.db.flush()


async def start_push(ctx: Ctx, auth: AuthSession, batch_id: str, channel: str) -> None:
    batch = await batch_of(ctx, auth.identity_id, batch_id, lock=True)
    _can_start(batch)
    await factors.require_push(ctx, auth, channel)
    _started(ctx, batch, auth, channel)
    await ctx.db.flush()


async def verify_otp(ctx: Ctx, auth: AuthSession, batch_id: str, code: str) -> None:
    """The batch's SMS code; a refusal that counts is kept although the answer is a 409."""
    batch = await batch_of(ctx, auth.identity_id, batch_id, lock=True)
    if batch.state != PENDING_CHALLENGE or batch.challenge_channel != SMS:
        raise Conflict("STATE_INVALID")
    if batch.challenge_user_id != auth.user_id:
        raise Conflict("CHANNEL_NOT_REGISTERED")
    await factors.registered_mobile(ctx, auth)
    if ctx.now >= (batch.challenge_started_at or batch.created_at) + CHALLENGE_TTL_MS:
        await failed(ctx, batch)
        raise Conflict("VERIFICATION_CODE_EXPIRED").keeping_changes()
    try:
        await codes.consume(
            ctx.db,
            programme_id=ctx.programme.id,
            sandbox=ctx.sandbox,
            subject=_subject(batch),
            purpose=OTP_PURPOSE,
            code=code,
            now_ms=ctx.now,
        )
    except codes.CodeExpired:
        await failed(ctx, batch)
        raise Conflict("VERIFICATION_CODE_EXPIRED").keeping_changes() from None
    except codes.CodeInvalid:
        batch.challenge_failures += 1
        limit = ctx.programme.sca_challenge_limit
        if batch.challenge_failures >= limit:
            await failed(ctx, batch)
            raise Conflict("CHALLENGE_LIMIT_EXCEEDED").keeping_changes() from None
        if batch.challenge_failures == limit - 1:
            raise Conflict("ONE_CHALLENGE_LIMIT_REMAINING").keeping_changes() from None
        raise Conflict("VERIFICATION_CODE_INVALID").keeping_changes() from None
    await passed(ctx, batch)


async def _members(ctx: Ctx, batch: BeneficiaryBatch) -> list[Beneficiary]:
    column = Beneficiary.batch_id if batch.operation == CREATE else Beneficiary.remove_batch_id
    stmt = (
        select(Beneficiary)
        .where(Beneficiary.programme_id == ctx.programme.id, column == batch.id)
        .order_by(Beneficiary.id)
        .with_for_update()
    )
    return list((await ctx.db.execute(stmt)).scalars())


async def passed(ctx: Ctx, batch: BeneficiaryBatch) -> None:
    """Its create beneficiaries `ACTIVE`, or its remove beneficiaries `REMOVED`."""
    batch.state = COMPLETED
    batch.updated_at = ctx.now
    members = await _members(ctx, batch)
    for b in members:
        if batch.operation == CREATE and b.state == PENDING_CHALLENGE:
            b.state = ACTIVE
        elif batch.operation == REMOVE and b.state == ACTIVE:
            b.state = REMOVED
            b.remove_batch_id = None
        b.updated_at = ctx.now
    await ctx.db.flush()
    await events.batch(ctx, batch, members, "CHALLENGE_COMPLETED")


async def failed(ctx: Ctx, batch: BeneficiaryBatch) -> None:
    """Its create beneficiaries `CHALLENGE_FAILED`; a remove batch's stay `ACTIVE`."""
    batch.state = CHALLENGE_FAILED
    batch.updated_at = ctx.now
    members = await _members(ctx, batch)
    for b in members:
        if batch.operation == CREATE and b.state == PENDING_CHALLENGE:
            b.state = CHALLENGE_FAILED
        elif batch.operation == REMOVE:
            b.remove_batch_id = None
        b.updated_at = ctx.now
    await ctx.db.flush()
    await events.batch(ctx, batch, members, CHALLENGE_FAILED)


async def push_answered(ctx: Ctx, batch_id: int, channel: str, accept: bool) -> str | None:
    """The device's answer to a batch's push (simulator): None when done, else the reason it
    could not be (`missing`: no push on that channel is open on it; `decided`)."""
    stmt = select(BeneficiaryBatch).where(
        BeneficiaryBatch.programme_id == ctx.programme.id, BeneficiaryBatch.id == batch_id
    )
    batch = (await ctx.db.execute(stmt.with_for_update())).scalar_one_or_none()
    if batch is None or batch.challenge_channel != channel:
        return "missing"
    if batch.state != PENDING_CHALLENGE:
        return "decided"
    if ctx.now >= (batch.challenge_started_at or batch.created_at) + CHALLENGE_TTL_MS:
        await failed(ctx, batch)
        return "decided"
    await (passed(ctx, batch) if accept else failed(ctx, batch))
    return None


# Paying a beneficiary (sends and wire transfers, D38)


async def payable(ctx: Ctx, owner_id: int, beneficiary_id: str, kind: str) -> Beneficiary:
    """The identity's beneficiary a payment names: unknown or another identity's is 409
    `BENEFICIARY_NOT_FOUND`; the wrong kind (`instrument` for a send, `bank` for a wire
    transfer), or any state but `ACTIVE`, `BENEFICIARY_TYPE_INVALID` (as observed)."""
    number = parse_id(beneficiary_id)
    stmt = select(Beneficiary).where(
        Beneficiary.programme_id == ctx.programme.id,
        Beneficiary.identity_id == owner_id,
        Beneficiary.id == (number or 0),
    )
    found = (await ctx.db.execute(stmt)).scalar_one_or_none()
    if found is None:
        raise Conflict("BENEFICIARY_NOT_FOUND")
    if found.kind != kind or found.state != ACTIVE:
        raise Conflict("BENEFICIARY_TYPE_INVALID")
    return found
