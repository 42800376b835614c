"""Payments (D12): a transfer moves money between two instruments of one identity, at once.

Every create checks what the caller may do in the order a client can fix it (profile, source,
destination, their states, currency, amount, fee), then writes the payment and its ledger
transaction in the request's transaction: the source pays amount + fee, the destination gets the
amount, the programme's revenue the fee. A refusal raises before anything is written, so the
request's rollback leaves no trace (no pending amount, no payment, no idempotency answer).
"""

from __future__ import annotations

from dataclasses import dataclass

from multibank.accounts import repository as accounts
from multibank.accounts.models import ManagedAccount
from multibank.identities import repository as identities
from multibank.identities.service import is_verified
from multibank.kernel.errors import Conflict, NotFound
from multibank.kernel.ids import new_id
from multibank.kernel.validation import parse_id
from multibank.ledger import service as ledger
from multibank.ledger.models import REVENUE
from multibank.payments import repository as repo
from multibank.payments.models import PROFILE_KIND, TRANSFER, Payment
from multibank.payments.schemas import INT64_MAX, InstrumentId, TransferCreate
from multibank.programmes import repository as programmes
from multibank.programmes.context import Ctx
from multibank.programmes.models import Profile
from multibank.programmes.service import movement_fees_of

MANAGED_ACCOUNTS = "managed_accounts"


@dataclass(frozen=True)
class Owner:
    """The logged-in identity a payment belongs to, and the user who makes it."""

    identity_id: int
    identity_type: str
    user_id: int


async def _profile(ctx: Ctx, kind: str, profile_id: str) -> Profile | None:
    pid = parse_id(profile_id)
    profile = None if pid is None else await programmes.get_profile(ctx.db, ctx.programme.id, pid)
    return profile if profile is not None and profile.kind == PROFILE_KIND[kind] else None


async def _instruments(ctx: Ctx, wanted: list[InstrumentId]) -> dict[int, ManagedAccount]:
    """The programme's managed accounts among `wanted`, locked in id order (the order the ledger
    locks balances in, so two payments between the same accounts never deadlock); a state
    checked here holds until the payment commits. Cards are not issued here: never found."""
    ids = sorted({i for i in (parse_id(w.id) for w in wanted if w.type == MANAGED_ACCOUNTS) if i})
    found: dict[int, ManagedAccount] = {}
    for account_id in ids:
        account = await accounts.get_in_programme(
            ctx.db, ctx.programme.id, account_id, for_update=True
        )
        if account is not None:
            found[account.id] = account
    return found


def _own(
    found: dict[int, ManagedAccount], wanted: InstrumentId, owner: Owner
) -> ManagedAccount | None:
    if wanted.type != MANAGED_ACCOUNTS:
        return None
    account = found.get(parse_id(wanted.id) or 0)
    return account if account is not None and account.identity_id == owner.identity_id else None


def _check_source(account: ManagedAccount) -> None:
    if account.state == "DESTROYED":
        raise Conflict("SOURCE_INSTRUMENT_DESTROYED")
    if account.state == "BLOCKED":
        raise Conflict("SOURCE_INSTRUMENT_BLOCKED")


def _check_destination(account: ManagedAccount) -> None:
    if account.state == "DESTROYED":
        raise Conflict("DESTINATION_INSTRUMENT_DESTROYED")
    if account.state == "BLOCKED":
        raise Conflict("DESTINATION_INSTRUMENT_BLOCKED")


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


async def create_transfer(ctx: Ctx, owner: Owner, data: TransferCreate) -> Payment:
    profile = await _profile(ctx, TRANSFER, data.profileId)
    if profile is None:
        raise NotFound("Transfer profile not found")
    if not profile.active:
        raise Conflict("PROFILE_INACTIVE")
    found = await _instruments(ctx, [data.source, data.destination])
    source = _own(found, data.source, owner)
    if source is None:
        raise Conflict("SOURCE_NOT_FOUND")
    destination = _own(found, data.destination, owner)
    if destination is None:
        raise Conflict("DESTINATION_NOT_FOUND")
    if source.id == destination.id:
        raise Conflict("SOURCE_AND_DESTINATION_MUST_BE_DIFFERENT")
    _check_source(source)
    _check_destination(destination)
    identity = await identities.get(ctx.db, ctx.programme.id, owner.identity_id)
    if identity is None or not is_verified(identity):
        # Due diligence no longer approved: its instruments may not move money.
        raise Conflict("INSTRUMENT_DENIED_TRANSACTION")
    currency, amount = data.destinationAmount.currency, data.destinationAmount.amount
    if source.currency != currency or destination.currency != currency:
        raise Conflict("CURRENCY_MISMATCH")
    fee = fee_of(profile, currency)
    check_amount(amount, fee)
    payment = Payment(
        id=new_id(),
        programme_id=ctx.programme.id,
        kind=TRANSFER,
        identity_id=owner.identity_id,
        identity_type=owner.identity_type,
        user_id=owner.user_id,
        profile_id=profile.id,
        tag=data.tag,
        source_type=MANAGED_ACCOUNTS,
        source_id=source.id,
        destination_type=MANAGED_ACCOUNTS,
        destination_id=destination.id,
        currency=currency,
        amount=amount,
        fee=fee,
        state="COMPLETED",
        created_at=ctx.now,
        updated_at=ctx.now,
    )
    await _move(ctx, payment, source, destination)
    ctx.db.add(payment)
    await ctx.db.flush()
    return payment


async def _move(
    ctx: Ctx, payment: Payment, source: ManagedAccount, destination: ManagedAccount
) -> None:
    """One ledger transaction, named after the payment: source -(amount + fee), destination
    +amount, revenue +fee. FUNDS_INSUFFICIENT when the source holds less than amount + fee."""
    total = payment.amount + payment.fee
    legs = [
        ledger.Leg(source.id, payment.currency, -total, -total),
        ledger.Leg(destination.id, payment.currency, payment.amount, payment.amount),
    ]
    if payment.fee:
        revenue = await ledger.system_account(
            ctx.db,
            ctx.programme.id,
            REVENUE,
            payment.currency,
            ctx.now,
            shard=ledger.revenue_shard(source.id),
        )
        legs.append(ledger.Leg(revenue, payment.currency, payment.fee, payment.fee, guarded=False))
    details = {
        "byAccount": {
            str(source.id): {
                "fee": payment.fee,
                "fields": {
                    "destinationInstrumentType": MANAGED_ACCOUNTS,
                    "destinationInstrumentId": str(destination.id),
                    "destinationInstrumentFriendlyName": destination.friendly_name,
                },
            },
            str(destination.id): {
                "fields": {
                    "sourceInstrumentType": MANAGED_ACCOUNTS,
                    "sourceInstrumentId": str(source.id),
                    "sourceInstrumentFriendlyName": source.friendly_name,
                },
            },
        },
        "profileId": str(payment.profile_id),
    }
    try:
        tx = await ledger.post(
            ctx.db,
            programme_id=ctx.programme.id,
            type_=payment.kind,
            legs=legs,
            now_ms=ctx.now,
            state="COMPLETED",
            details=details,
            transaction_id=payment.id,
        )
    except ledger.InsufficientFunds:
        raise Conflict("FUNDS_INSUFFICIENT") from None
    payment.transaction_id = tx.id


async def load(ctx: Ctx, owner: Owner, kind: str, payment_id: str) -> Payment:
    """The owner's payment of `kind`; another identity's or an unknown one is 404."""
    pid = parse_id(payment_id)
    payment = (
        None
        if pid is None
        else await repo.get(ctx.db, ctx.programme.id, owner.identity_id, kind, pid)
    )
    if payment is None:
        raise NotFound(f"{kind.replace('_', ' ').capitalize()} not found")
    return payment


async def page(
    ctx: Ctx, owner: Owner, kind: str, filters: repo.Filters, offset: int, limit: int | None
) -> tuple[int, list[Payment]]:
    size = 100 if limit is None else min(limit, 100)
    return await repo.page(ctx.db, ctx.programme.id, owner.identity_id, kind, filters, offset, size)
