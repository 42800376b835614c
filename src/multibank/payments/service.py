"""Payments (D12, D13): transfers between an identity's own instruments, sends to another
identity's, and what every payment kind shares (fees, holds, completion, release, reads).

Every create checks what the caller may do in the order a client can fix it (profile, source,
destination, their states, currency, amount, fee), then writes the payment and its ledger
transaction in the request's transaction. A transfer, and a send that needs no SCA, moves at once:
the source pays amount + fee, the destination gets the amount, the programme's revenue the fee. A
send that needs SCA holds amount + fee on the source (available down, actual unchanged) and waits
for its challenge (`payments.sca`). A refusal raises before anything is written, so the request's
rollback leaves no trace (no hold, no payment, no idempotency answer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select

from multibank.accounts import repository as accounts
from multibank.accounts.models import ManagedAccount
from multibank.cards import repository as cards
from multibank.cards.models import ManagedCard
from multibank.identities import repository as identities
from multibank.identities.service import holder_names, is_verified
from multibank.kernel.errors import Conflict, NotFound
from multibank.kernel.ids import new_id
from multibank.kernel.validation import parse_id
from multibank.ledger import service as ledger
from multibank.ledger.models import REVENUE, SETTLEMENT
from multibank.payments import events
from multibank.payments import repository as repo
from multibank.payments.models import (
    CANCELLED,
    COMPLETED,
    EXECUTED,
    FAILED,
    HIDDEN_FROM_3_29,
    LOW_VALUE,
    OWT,
    PENDING,
    PROFILE_KIND,
    SCHEDULED,
    SEND,
    TRANSFER,
    TRUSTED_BENEFICIARY,
    Payment,
)
from multibank.payments.schemas import INT64_MAX, InstrumentId, TransferCreate
from multibank.programmes import repository as programmes
from multibank.programmes.context import Ctx
from multibank.programmes.models import Profile
from multibank.programmes.service import movement_fees_of

MANAGED_ACCOUNTS = "managed_accounts"
MANAGED_CARDS = "managed_cards"
DEBIT_MODE = "DEBIT_MODE"
# What a transfer or send moves money between: an account, or a card (a prepaid card's money is
# the ledger account with the card's id, D23; a debit card holds none and is refused).
Instrument = ManagedAccount | ManagedCard
CHALLENGE_TTL_MS = 5 * 60_000  # D13: a payment waits 5 minutes for its challenge
# How far ahead a payment may be scheduled (D40), on the programme clock.
SCHEDULE_HORIZON_MS = 365 * 86_400_000


@dataclass(frozen=True)
class Owner:
    """The logged-in identity a payment belongs to, and the user who makes it."""

    identity_id: int
    identity_type: str
    user_id: int


async def profile_of(ctx: Ctx, kind: str, profile_id: str) -> Profile | None:
    pid = parse_id(profile_id)
    profile = None if pid is None else await programmes.get_profile(ctx.db, ctx.programme.id, pid)
    return profile if profile is not None and profile.kind == PROFILE_KIND[kind] else None


async def instruments(ctx: Ctx, wanted: list[InstrumentId]) -> dict[tuple[str, int], Instrument]:
    """The programme's accounts and cards among `wanted`, by (type, id), locked in id order
    (the order the ledger locks balances in, so two payments between the same instruments never
    deadlock; a card's id is its ledger account's); a state checked here holds until the
    payment commits."""
    keys = sorted(
        {(w.type, i) for w in wanted if (i := parse_id(w.id))}, key=lambda key: (key[1], key[0])
    )
    found: dict[tuple[str, int], Instrument] = {}
    for kind, instrument_id in keys:
        instrument: Instrument | None
        if kind == MANAGED_ACCOUNTS:
            instrument = await accounts.get_in_programme(
                ctx.db, ctx.programme.id, instrument_id, for_update=True
            )
        else:
            instrument = await cards.get_in_programme(
                ctx.db, ctx.programme.id, instrument_id, for_update=True
            )
        if instrument is not None:
            found[(kind, instrument.id)] = instrument
    return found


def kind_of(instrument: Instrument) -> str:
    return MANAGED_CARDS if isinstance(instrument, ManagedCard) else MANAGED_ACCOUNTS


def found_of(found: dict[tuple[str, int], Instrument], wanted: InstrumentId) -> Instrument | None:
    return found.get((wanted.type, parse_id(wanted.id) or 0))


def own(
    found: dict[tuple[str, int], Instrument], wanted: InstrumentId, owner: Owner
) -> Instrument | None:
    instrument = found_of(found, wanted)
    if instrument is None or instrument.identity_id != owner.identity_id:
        return None
    return instrument


def own_account(
    found: dict[tuple[str, int], Instrument], wanted: InstrumentId, owner: Owner
) -> ManagedAccount | None:
    """The owner's account named by `wanted`; a card is not an account (a wire transfer's
    source must be one: SOURCE_NOT_FOUND for a card, money-movement.md §1.4)."""
    instrument = own(found, wanted, owner)
    return instrument if isinstance(instrument, ManagedAccount) else None


def debit(instrument: Instrument) -> bool:
    return isinstance(instrument, ManagedCard) and instrument.mode == DEBIT_MODE


def check_source(account: Instrument) -> None:
    if account.state == "DESTROYED":
        raise Conflict("SOURCE_INSTRUMENT_DESTROYED")
    if account.state == "BLOCKED":
        raise Conflict("SOURCE_INSTRUMENT_BLOCKED")


def check_destination(account: Instrument) -> None:
    if account.state == "DESTROYED":
        raise Conflict("DESTINATION_INSTRUMENT_DESTROYED")
    if account.state == "BLOCKED":
        raise Conflict("DESTINATION_INSTRUMENT_BLOCKED")


async def check_verified(ctx: Ctx, identity_id: int) -> None:
    identity = await identities.get(ctx.db, ctx.programme.id, identity_id)
    if identity is None or not is_verified(identity):
        # Due diligence no longer approved: its instruments may not move money.
        raise Conflict("INSTRUMENT_DENIED_TRANSACTION")


def fee_of(profile: Profile, currency: str) -> int:
    """The profile's fee in `currency`; a currency the profile does not serve has none."""
    if currency not in profile.currencies:
        raise Conflict("FEE_NOT_CONFIGURED_FOR_CURRENCY")
    return movement_fees_of(profile).get(currency, 0)


def check_amount(amount: int, fee: int) -> None:
    if amount <= 0:
        raise Conflict("AMOUNT_INVALID")
    if amount + fee > INT64_MAX:  # no balance holds that much
        raise Conflict("FUNDS_INSUFFICIENT")


def new_payment(
    ctx: Ctx, kind: str, owner: Owner, profile: Profile, tag: str | None, **fields: Any
) -> Payment:
    return Payment(
        id=new_id(),
        programme_id=ctx.programme.id,
        kind=kind,
        identity_id=owner.identity_id,
        identity_type=owner.identity_type,
        user_id=owner.user_id,
        profile_id=profile.id,
        tag=tag,
        reserved=0,
        challenge_failures=0,
        created_at=ctx.now,
        updated_at=ctx.now,
        **fields,
    )


async def _priced(
    ctx: Ctx,
    owner: Owner,
    profile: Profile,
    source: Instrument,
    destination: Instrument,
    data: TransferCreate,
) -> tuple[str, int, int]:
    """The checks a transfer and a send share once both instruments are found: their states,
    the payer's due diligence, one currency, the profile's fee and the amount. Answers
    (currency, amount, fee)."""
    check_source(source)
    check_destination(destination)
    await check_verified(ctx, owner.identity_id)
    currency, amount = data.destinationAmount.currency, data.destinationAmount.amount
    if source.currency != currency or destination.currency != currency:
        raise Conflict("CURRENCY_MISMATCH")
    fee = fee_of(profile, currency)
    check_amount(amount, fee)
    return currency, amount, fee


# Scheduling (3.63 line, D40): a payment made now to go later. Nothing is held meanwhile; when
# its time comes (`execute`, from the due-work scheduler, a read of it or the simulator) the
# create's checks run again and the money moves then, or it ends FAILED with why.


def scheduled_time(ctx: Ctx, value: str | None) -> int | None:
    """A create's `scheduledTimestamp` (digits, epoch ms of the programme clock), or None for a
    payment that goes now; at or before now, or more than a year ahead, is 409
    `SCHEDULED_TIMESTAMP_INVALID`."""
    if value is None:
        return None
    at = int(value)
    if at <= ctx.now or at > ctx.now + SCHEDULE_HORIZON_MS:
        raise Conflict("SCHEDULED_TIMESTAMP_INVALID")
    return at


async def schedule(ctx: Ctx, payment: Payment) -> None:
    """Past its SCA (or with none to pass), a scheduled payment waits for its time."""
    payment.state = SCHEDULED
    payment.due_at = payment.scheduled_at
    payment.updated_at = ctx.now
    await ctx.db.flush()
    await events.payment(ctx, payment)


def ended(ctx: Ctx, payment: Payment, state: str, failure: str | None = None) -> None:
    """The payment is in `state` now; executed when that is where it ends (`EXECUTED`)."""
    payment.state = state
    payment.failure = failure
    payment.due_at = None
    payment.updated_at = ctx.now
    if state in EXECUTED and payment.executed_at is None:
        payment.executed_at = ctx.now


def failure_of(refusal: Conflict) -> str:
    """What a refusal at execution is kept as (the reference's internal names)."""
    code = refusal.error_code
    return "INSUFFICIENT_FUNDS" if code == "FUNDS_INSUFFICIENT" else code


async def execute(ctx: Ctx, payment: Payment) -> None:
    """A scheduled transfer or send whose time has come (the caller holds its row lock and saw
    it `SCHEDULED`): the create's checks again, then the money moves at once (`COMPLETED`); a
    check that fails ends it `FAILED` with why, nothing moved."""
    wanted = [
        InstrumentId.model_validate({"type": kind, "id": str(instrument_id)})
        for kind, instrument_id in (
            (payment.source_type, payment.source_id),
            (payment.destination_type, payment.destination_id),
        )
    ]
    found = await instruments(ctx, wanted)
    source = found.get((payment.source_type, payment.source_id))
    destination = found.get((payment.destination_type or "", payment.destination_id or 0))
    try:
        if source is None:
            raise Conflict("SOURCE_NOT_FOUND")
        if destination is None:
            raise Conflict("DESTINATION_NOT_FOUND")
        check_source(source)
        check_destination(destination)
        await check_verified(ctx, payment.identity_id)
        holders = None  # a transfer's statement entries name no holders (`create_transfer`)
        if payment.kind == SEND and destination.identity_id is not None:
            holders = await holder_names(ctx, [payment.identity_id, destination.identity_id])
        # A savepoint: a move refused for funds leaves no half-written transaction. The
        # payment's end is written with it (one UPDATE as the savepoint is released).
        async with ctx.db.begin_nested():
            await move_now(ctx, payment, source, destination, holders)
            ended(ctx, payment, COMPLETED)
    except Conflict as refusal:
        ended(ctx, payment, FAILED, failure_of(refusal))
        await ctx.db.flush()
    await events.payment(ctx, payment)


async def cancel_scheduled(ctx: Ctx, payment: Payment, reason: str | None) -> None:
    """A scheduled payment its payer stops before its time: `CANCELLED` (nothing was held);
    any other state is `TRANSACTION_NOT_SCHEDULED`. The caller holds its row lock, so a cancel
    and an execution of one payment are decided by the row: one of them finds it SCHEDULED."""
    if payment.state != SCHEDULED:
        raise Conflict("TRANSACTION_NOT_SCHEDULED")
    payment.cancellation_reason = reason
    ended(ctx, payment, CANCELLED)
    await ctx.db.flush()
    await events.payment(ctx, payment)


# Transfers


async def create_transfer(
    ctx: Ctx, owner: Owner, data: TransferCreate, scheduled_at: int | None = None
) -> Payment:
    """`scheduled_at`: the 3.63 line's scheduled transfer, `SCHEDULED` with nothing moved."""
    profile = await profile_of(ctx, TRANSFER, data.profileId)
    if profile is None:
        raise NotFound("Transfer profile not found")
    if not profile.active:
        raise Conflict("PROFILE_INACTIVE")
    found = await instruments(ctx, [data.source, data.destination])
    source = own(found, data.source, owner)
    if source is None:
        raise Conflict("SOURCE_NOT_FOUND")
    if debit(source):
        raise Conflict("SOURCE_CANNOT_BE_DEBIT_MODE_CARD")
    destination = own(found, data.destination, owner)
    if destination is None:
        raise Conflict("DESTINATION_NOT_FOUND")
    if debit(destination):  # also its own parent account's card: a debit card holds no money
        raise Conflict("DESTINATION_CANNOT_BE_DEBIT_MODE_CARD")
    if source.id == destination.id:
        raise Conflict("SOURCE_AND_DESTINATION_MUST_BE_DIFFERENT")
    currency, amount, fee = await _priced(ctx, owner, profile, source, destination, data)
    payment = new_payment(
        ctx,
        TRANSFER,
        owner,
        profile,
        data.tag,
        source_type=kind_of(source),
        source_id=source.id,
        destination_type=kind_of(destination),
        destination_id=destination.id,
        currency=currency,
        amount=amount,
        fee=fee,
        state=COMPLETED,
    )
    if scheduled_at is not None:
        payment.scheduled_at = scheduled_at
        ctx.db.add(payment)
        await schedule(ctx, payment)
        return payment
    await move_now(ctx, payment, source, destination)
    ctx.db.add(payment)
    await ctx.db.flush()
    await events.payment(ctx, payment)
    return payment


# Sends


async def create_send(
    ctx: Ctx,
    owner: Owner,
    data: TransferCreate,
    scheduled_at: int | None = None,
    beneficiary_id: int | None = None,
) -> Payment:
    """A send to another identity of the programme: at once when SCA does not apply (the
    programme's `sendsScaRequired` off, or the low-value exemption), else held and `PENDING`
    until its challenge is verified (or expires after 5 minutes). `scheduled_at` (3.63 line):
    `SCHEDULED` once past SCA, nothing held before its time. `beneficiary_id` (3.63 line): to
    a trusted beneficiary's instrument, exempt from SCA (`TRUSTED_BENEFICIARY`, D38)."""
    profile = await profile_of(ctx, SEND, data.profileId)
    if profile is None:
        raise Conflict("PROFILE_NOT_FOUND")
    if not profile.active:
        raise Conflict("PROFILE_INACTIVE")
    found = await instruments(ctx, [data.source, data.destination])
    source = own(found, data.source, owner)
    if source is None:
        raise Conflict("SOURCE_NOT_FOUND")
    if debit(source):
        raise Conflict("SOURCE_CANNOT_BE_DEBIT_MODE_CARD")
    destination = found_of(found, data.destination)
    if destination is None or destination.identity_id is None:  # a pool card is no one's yet
        if destination is None and await _elsewhere(ctx, data.destination):
            raise Conflict("SOURCE_AND_DESTINATION_MUST_BE_IN_SAME_PROGRAMME")
        raise Conflict("DESTINATION_NOT_FOUND")
    if debit(destination):
        raise Conflict("DESTINATION_CANNOT_BE_DEBIT_MODE_CARD")
    if destination.identity_id == owner.identity_id:
        raise Conflict("DESTINATION_BELONGS_TO_SAME_IDENTITY")
    currency, amount, fee = await _priced(ctx, owner, profile, source, destination, data)
    payment = new_payment(
        ctx,
        SEND,
        owner,
        profile,
        data.tag,
        source_type=kind_of(source),
        source_id=source.id,
        destination_type=kind_of(destination),
        destination_id=destination.id,
        destination_identity_id=destination.identity_id,
        currency=currency,
        amount=amount,
        fee=fee,
        state=PENDING,
    )
    # The exemption locks the identity's row before any balance is touched (see owt.create).
    payment.beneficiary_id = beneficiary_id
    exemption = await exemption_of(ctx, owner, payment, ctx.programme.sends_sca_required)
    if scheduled_at is not None:
        payment.scheduled_at = scheduled_at
        ctx.db.add(payment)
        if not ctx.programme.sends_sca_required or exemption is not None:
            payment.exemption = exemption
            await schedule(ctx, payment)
        else:
            payment.due_at = ctx.now + CHALLENGE_TTL_MS
            await ctx.db.flush()
            await events.payment(ctx, payment, "PENDING_CHALLENGE")
        return payment
    holders = await holder_names(ctx, [owner.identity_id, destination.identity_id])
    if not ctx.programme.sends_sca_required or exemption is not None:
        payment.exemption = exemption
        payment.state = COMPLETED
        await move_now(ctx, payment, source, destination, holders)
    else:
        await hold(ctx, payment, source, details_of(payment, source, destination, holders))
        payment.due_at = ctx.now + CHALLENGE_TTL_MS
    ctx.db.add(payment)
    await ctx.db.flush()
    await events.payment(ctx, payment, None if payment.state == COMPLETED else "PENDING_CHALLENGE")
    return payment


async def _elsewhere(ctx: Ctx, wanted: InstrumentId) -> bool:
    """Whether the account or card exists in another programme (the reference names that
    case)."""
    instrument_id = parse_id(wanted.id)
    if instrument_id is None:
        return False
    table = ManagedCard if wanted.type == MANAGED_CARDS else ManagedAccount
    stmt = select(table.programme_id).where(table.id == instrument_id)
    programme_id = (await ctx.db.execute(stmt)).scalar_one_or_none()
    return programme_id is not None and programme_id != ctx.programme.id


async def exemption_of(ctx: Ctx, owner: Owner, payment: Payment, sca: bool) -> str | None:
    """Why SCA does not apply to the payment, if it does not: a trusted beneficiary (D38; it
    takes no low-value place), else the low-value exemption when the programme asks for SCA."""
    if payment.beneficiary_id is not None:
        return TRUSTED_BENEFICIARY
    return await sca_exemption(ctx, owner, payment.amount) if sca else None


async def sca_exemption(ctx: Ctx, owner: Owner, amount: int) -> str | None:
    """`LOW_VALUE` (PSD2 RTS Art. 16, D13) when the amount is at most the programme's limit and
    the identity's exempted payments since its last SCA, this one included, stay within the
    count and cumulative limits; else None (SCA applies).

    The identity's row is locked first, so two payments of one identity decide in turn and
    cannot both take the last exempted place."""
    p = ctx.programme
    if amount > p.low_value_max_amount or p.low_value_max_count <= 0:
        return None
    await identities.get_for_update(ctx.db, p.id, owner.identity_id)
    mine = (Payment.programme_id == p.id) & (Payment.identity_id == owner.identity_id)
    last_sca = select(func.coalesce(func.max(Payment.sca_at), -1)).where(mine).scalar_subquery()
    stmt = select(func.count(), func.coalesce(func.sum(Payment.amount), 0)).where(
        mine, Payment.exemption == LOW_VALUE, Payment.created_at > last_sca
    )
    count, total = (await ctx.db.execute(stmt)).one()
    if int(count) + 1 > p.low_value_max_count or int(total) + amount > p.low_value_max_total:
        return None
    return LOW_VALUE


# Money: at once, or held and then paid out or given back


def details_of(
    payment: Payment,
    source: Instrument,
    destination: Instrument | None,
    holders: dict[int, tuple[str, str]] | None = None,
) -> dict[str, Any]:
    """The ledger transaction's details: what each side's statement entry shows (D12), and the
    fee on the source's, in the `additionalFields` names of the interface (contract.md,
    StatementEntry). Each side sees the other: a transfer's the account's friendly name, a
    send's the other identity (`holders`: type and name by identity id) but not its account's
    name, a wire transfer's its beneficiary."""
    fields: dict[str, Any] = {}
    if destination is not None:
        fields = {
            "destinationInstrumentType": kind_of(destination),
            "destinationInstrumentId": str(destination.id),
        }
        if payment.kind == TRANSFER:
            fields["destinationInstrumentFriendlyName"] = destination.friendly_name
        else:
            fields.update(_identity_fields("destination", destination.identity_id, holders))
    elif payment.beneficiary is not None:
        fields = beneficiary_fields(payment)
    by_account: dict[str, Any] = {str(source.id): {"fee": payment.fee, "fields": fields}}
    if payment.kind == OWT:
        # The wire transfer's entry shows the amount sent; the fee is its cardholderFee.
        by_account[str(source.id)]["transactionAmount"] = -payment.amount
    if destination is not None:
        theirs = {
            "sourceInstrumentType": kind_of(source),
            "sourceInstrumentId": str(source.id),
        }
        if payment.kind == TRANSFER:
            theirs["sourceInstrumentFriendlyName"] = source.friendly_name
        else:
            theirs.update(_identity_fields("source", source.identity_id, holders))
        by_account[str(destination.id)] = {"fields": theirs}
    return {"byAccount": by_account, "profileId": str(payment.profile_id)}


def _identity_fields(
    side: str, identity_id: int | None, holders: dict[int, tuple[str, str]] | None
) -> dict[str, str]:
    """`{side}IdentityType`, `…Id` and `…Name` of the identity on that side of a send."""
    found = None if identity_id is None else (holders or {}).get(identity_id)
    if found is None:
        return {}
    kind, name = found
    return {
        f"{side}IdentityType": kind,
        f"{side}IdentityId": str(identity_id),
        f"{side}IdentityName": name,
    }


def beneficiary_fields(payment: Payment) -> dict[str, Any]:
    """A wire transfer's beneficiary: the account is the IBAN (SEPA) or the account number
    (Faster Payments), the bank code the BIC or the sort code."""
    b = payment.beneficiary or {}
    details = b.get("bankAccountDetails") or {}
    out = {
        "beneficiaryName": b.get("name"),
        "beneficiaryAccount": details.get("iban") or details.get("accountNumber"),
        "beneficiaryBankCode": details.get("bankIdentifierCode") or details.get("sortCode"),
        "description": payment.description,
    }
    return {k: v for k, v in out.items() if v}


async def _revenue(ctx: Ctx, payment: Payment) -> ledger.Leg | None:
    if not payment.fee:
        return None
    revenue = await ledger.system_account(
        ctx.db,
        ctx.programme.id,
        REVENUE,
        payment.currency,
        ctx.now,
        shard=ledger.revenue_shard(payment.source_id),
    )
    return ledger.Leg(revenue, payment.currency, payment.fee, payment.fee, guarded=False)


async def move_now(
    ctx: Ctx,
    payment: Payment,
    source: Instrument,
    destination: Instrument,
    holders: dict[int, tuple[str, str]] | None = None,
) -> None:
    """One ledger transaction, named after the payment: source -(amount + fee), destination
    +amount, revenue +fee. FUNDS_INSUFFICIENT when the source holds less than amount + fee."""
    total = payment.amount + payment.fee
    legs = [
        ledger.Leg(source.id, payment.currency, -total, -total),
        ledger.Leg(destination.id, payment.currency, payment.amount, payment.amount),
    ]
    revenue = await _revenue(ctx, payment)
    if revenue is not None:
        legs.append(revenue)
    try:
        tx = await ledger.post(
            ctx.db,
            programme_id=ctx.programme.id,
            type_=payment.kind,
            legs=legs,
            now_ms=ctx.now,
            state=COMPLETED,
            details=details_of(payment, source, destination, holders),
            transaction_id=payment.id,
        )
    except ledger.InsufficientFunds:
        raise Conflict("FUNDS_INSUFFICIENT") from None
    payment.transaction_id = tx.id
    payment.executed_at = ctx.now


async def hold(ctx: Ctx, payment: Payment, source: Instrument, details: dict[str, Any]) -> None:
    """Amount + fee held on the source; FUNDS_INSUFFICIENT if its available balance lacks it."""
    total = payment.amount + payment.fee
    try:
        tx = await ledger.reserve(
            ctx.db,
            programme_id=ctx.programme.id,
            type_=payment.kind,
            account_id=source.id,
            currency=payment.currency,
            total=total,
            now_ms=ctx.now,
            details=details,
            transaction_id=payment.id,
        )
    except ledger.InsufficientFunds:
        raise Conflict("FUNDS_INSUFFICIENT") from None
    payment.transaction_id = tx.id
    payment.reserved = total


async def pay_out(ctx: Ctx, payment: Payment) -> None:
    """The hold leaves the source: to the destination account (a send) or out of the
    programme through its settlement account (a wire transfer), the fee to revenue."""
    if payment.destination_id is not None:
        to = payment.destination_id
    else:
        to = await ledger.system_account(
            ctx.db, ctx.programme.id, SETTLEMENT, payment.currency, ctx.now
        )
    credits = [ledger.Leg(to, payment.currency, payment.amount, payment.amount, guarded=False)]
    revenue = await _revenue(ctx, payment)
    if revenue is not None:
        credits.append(revenue)
    await ledger.settle(
        ctx.db,
        programme_id=ctx.programme.id,
        transaction_id=payment.id,
        account_id=payment.source_id,
        currency=payment.currency,
        total=payment.reserved,
        credits=credits,
        now_ms=ctx.now,
    )
    payment.reserved = 0
    ended(ctx, payment, COMPLETED)
    await events.payment(ctx, payment)


async def give_back(ctx: Ctx, payment: Payment, state: str, failure: str | None) -> None:
    """The payment ends without moving money: the hold is released, the payment is `state`."""
    if payment.reserved:
        await ledger.release(
            ctx.db,
            programme_id=ctx.programme.id,
            transaction_id=payment.id,
            account_id=payment.source_id,
            currency=payment.currency,
            total=payment.reserved,
            now_ms=ctx.now,
            state=state,
        )
    payment.reserved = 0
    ended(ctx, payment, state, failure)
    await events.payment(ctx, payment)


# Reads


async def load(
    ctx: Ctx,
    owner: Owner,
    kind: str,
    payment_id: str,
    lock: bool = False,
    hidden: tuple[str, ...] = HIDDEN_FROM_3_29,
) -> Payment:
    """The owner's payment of `kind`; another identity's, an unknown one, or one in a state the
    caller's interface does not show (`hidden`) is 404."""
    pid = parse_id(payment_id)
    payment = (
        None
        if pid is None
        else await repo.get(ctx.db, ctx.programme.id, owner.identity_id, kind, pid, lock, hidden)
    )
    if payment is None:
        raise NotFound(f"{NAMES[kind]} not found")
    return payment


NAMES = {TRANSFER: "Transfer", SEND: "Send", OWT: "Outgoing wire transfer"}


async def page(
    ctx: Ctx,
    owner: Owner,
    kind: str,
    filters: repo.Filters,
    offset: int,
    limit: int | None,
    hidden: tuple[str, ...] = HIDDEN_FROM_3_29,
) -> tuple[int, list[Payment]]:
    size = 100 if limit is None else min(limit, 100)
    return await repo.page(
        ctx.db, ctx.programme.id, owner.identity_id, kind, filters, offset, size, hidden
    )
