"""The card pool and assign (D31): the operator creates unassigned prepaid cards of a card
profile, each with an `externalReference` and an activation code; `POST /managed_cards/assign`
gives one to the caller's identity.

A pool card is a managed card without an owner (`identity_id` NULL), so its number is unique
in the programme with every other card's and no owner's query returns it. Its activation code
is shown once, at creation, and stored only as a keyed hash (the card verification key, bound
to the card's id). Its ledger account opens when it is assigned: an unassigned card holds no
money. Flushes, never commits."""

from __future__ import annotations

import hmac
import secrets
from typing import Annotated

from pydantic import StringConstraints
from sqlalchemy import func, select

from multibank.accounts.service import Owner
from multibank.cards import lifecycle, manufacturing
from multibank.cards import physical as physical_cards
from multibank.cards import repository as repo
from multibank.cards import service as cards
from multibank.cards.models import ManagedCard
from multibank.cards.schemas import (
    BillingAddress,
    CardholderMobile,
    FriendlyName,
    NameOnCard,
    NameOnCardLine2,
    TimeoutDecision,
)
from multibank.identities import repository as identities
from multibank.identities.service import is_verified
from multibank.kernel.carddata import TOKEN_LENGTH, CardKeyring
from multibank.kernel.errors import Conflict
from multibank.kernel.ids import new_id
from multibank.kernel.validation import parse_id
from multibank.kernel.vocabulary import Wire
from multibank.ledger import service as ledger
from multibank.programmes import repository as programmes
from multibank.programmes.context import Ctx

# The prepaid card profiles a pool draws from, and the identity type each serves (D19).
POOL_PROFILES = {
    cards.CARD_PROFILES[("CORPORATE", cards.PREPAID)]: "CORPORATE",
    cards.CARD_PROFILES[("CONSUMER", cards.PREPAID)]: "CONSUMER",
}
MAX_BATCH = 1000
REFERENCE_LENGTH = 16
_REFERENCE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O or 1/I to misread
ACTIVATION_CODE_DIGITS = 8
# Wrong activation codes that lock a pool card (decision 0074), as three wrong PINs block a PIN.
ACTIVATION_TRIES = 3
_HANDLE_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


class ManagedCardAssign(Wire):
    """cards.md §3.14."""

    externalReference: Annotated[str, StringConstraints(min_length=1, max_length=50)]
    activationCode: Annotated[str, StringConstraints(min_length=1, max_length=50)]
    friendlyName: FriendlyName
    nameOnCard: NameOnCard
    nameOnCardLine2: NameOnCardLine2 | None = None
    billingAddress: BillingAddress
    cardholderMobileNumber: CardholderMobile | None = None
    authForwardingDefaultTimeoutDecision: TimeoutDecision | None = None


def _reference() -> str:
    return "".join(secrets.choice(_REFERENCE_ALPHABET) for _ in range(REFERENCE_LENGTH))


def _code() -> str:
    return "".join(secrets.choice("0123456789") for _ in range(ACTIVATION_CODE_DIGITS))


async def _reference_taken(ctx: Ctx, reference: str) -> bool:
    stmt = select(ManagedCard.id).where(
        ManagedCard.programme_id == ctx.programme.id, ManagedCard.pool_reference == reference
    )
    return (await ctx.db.execute(stmt)).first() is not None


async def create_pool(
    ctx: Ctx,
    keys: CardKeyring,
    profile: str,
    count: int,
    physical: bool = False,
    currency: str | None = None,
) -> list[tuple[str, str]]:
    """`count` unassigned prepaid cards of the card profile `profile` (its id), in `currency`
    (default: the profile's first), virtual or (`physical`) physical and already activated
    (D31); answers each card's (externalReference, activationCode), which is the only time the
    code is shown."""
    if not 1 <= count <= MAX_BATCH:
        raise ValueError(f"count must be 1 to {MAX_BATCH}")
    pid = parse_id(profile)
    found = None if pid is None else await programmes.get_profile(ctx.db, ctx.programme.id, pid)
    if found is None or found.kind not in cards.CARD_PROFILES.values():
        raise Conflict("PROFILE_NOT_FOUND")
    if found.kind not in POOL_PROFILES:
        raise Conflict("PAYMENT_MODEL_CONSTRAINTS_VIOLATED", "a pool card is prepaid")
    if not found.active:
        raise Conflict("PROFILE_INACTIVE")
    currency = currency or found.currencies[0]
    if currency not in found.currencies:
        raise Conflict("CURRENCY_NOT_SUPPORTED_BY_PROFILE")
    if not ctx.sandbox:
        raise Conflict("PROVIDER_NOT_SUPPORTED_BY_PROFILE")  # no issuer adapter ships (D29)
    identity_type = POOL_PROFILES[found.kind]
    made: list[tuple[str, str]] = []
    for _ in range(count):
        card_id = new_id()
        number = cards.new_number()
        while await repo.number_taken(ctx.db, ctx.programme.id, keys.lookup_hash(number)):
            number = cards.new_number()
        reference = _reference()
        while await _reference_taken(ctx, reference):
            reference = _reference()
        code = _code()
        card = ManagedCard(
            id=card_id,
            programme_id=ctx.programme.id,
            identity_id=None,
            identity_type=identity_type,
            profile_id=found.id,
            mode=cards.PREPAID,
            parent_account_id=None,
            external_handle="".join(secrets.choice(_HANDLE_ALPHABET) for _ in range(TOKEN_LENGTH)),
            # What the card's owner gives at assign; placeholders until then.
            friendly_name=reference,
            tag=None,
            currency=currency,
            state=cards.ACTIVE,
            type="VIRTUAL",
            card_brand=cards.CARD_BRAND,
            level=identity_type,
            number_first_six=number[:6],
            number_last_four=number[-4:],
            number_hash=keys.lookup_hash(number),
            number_encrypted=keys.encrypt(number, card_id),
            version=1,
            name_on_card="",
            name_on_card_line2=None,
            cardholder_mobile="",
            billing_address={},
            start_mmyy=cards.mmyy(ctx.now),
            expiry_mmyy=cards.mmyy(ctx.now, cards.EXPIRY_PERIOD_MONTHS),
            expiry_period_months=cards.EXPIRY_PERIOD_MONTHS,
            renewal_type=cards.DEFAULT_RENEWAL,
            created_at=ctx.now,
            pool_reference=reference,
            activation_code_hash=keys.activation_hash(card_id, code),
        )
        if physical:
            _made_physical(keys, card, ctx.now)
        lifecycle.schedule(card)
        ctx.db.add(card)
        await ctx.db.flush()
        made.append((reference, code))
    return made


def _made_physical(keys: CardKeyring, card: ManagedCard, now: int) -> None:
    """A physical pool card is already activated (D31): upgraded, made and delivered to the
    operator who hands it out (`DELIVERED`, nothing pending, no delivery address), `PHYSICAL`,
    with a random PIN encrypted as an upgrade's is (D21). Its owner reads the PIN after assign."""
    card.type = "PHYSICAL"
    card.product_reference = physical_cards.DEFAULT
    card.carrier_type = physical_cards.DEFAULT
    card.delivery_method = physical_cards.STANDARD_DELIVERY
    card.delivery_address = None
    card.manufacturing_state = manufacturing.DELIVERED
    card.manufacturing_requested_at = now
    card.manufacturing_due_at = None
    card.pending_activation = False
    card.pin_blocked = False
    card.pin_encrypted = keys.encrypt(
        physical_cards.random_pin(), card.id, physical_cards.PIN_LABEL
    )


async def unassigned(ctx: Ctx, offset: int, limit: int) -> tuple[int, list[ManagedCard]]:
    """The programme's unassigned pool cards that can still be assigned, newest first, and
    how many there are."""
    where = (
        ManagedCard.programme_id == ctx.programme.id,
        ManagedCard.identity_id.is_(None),
        ManagedCard.state != cards.DESTROYED,
    )
    total = (await ctx.db.execute(select(func.count()).where(*where))).scalar_one()
    stmt = (
        select(ManagedCard)
        .where(*where)
        .order_by(ManagedCard.created_at.desc(), ManagedCard.id.desc())
        .offset(offset)
        .limit(limit)
    )
    return int(total), list((await ctx.db.execute(stmt)).scalars())


async def assign(ctx: Ctx, keys: CardKeyring, owner: Owner, body: ManagedCardAssign) -> repo.Row:
    """Gives the pool card `body.externalReference` to the owner's identity. The card's row is
        held from its lookup to the end of the transaction, so of two assigns of one reference the
        second finds it assigned: INSTRUMENT_NOT_FOUND, as for an unknown reference. A wrong code is
    counted on the card (kept though the assign is refused), and the third locks it."""
    if body.authForwardingDefaultTimeoutDecision is not None:
        raise Conflict("AUTH_FORWARDING_NOT_ENABLED")
    identity = await identities.get(ctx.db, ctx.programme.id, owner.identity_id)
    if identity is None or not is_verified(identity):
        raise Conflict("IDENTITY_NOT_VERIFIED")
    stmt = (
        select(ManagedCard)
        .where(
            ManagedCard.programme_id == ctx.programme.id,
            ManagedCard.pool_reference == body.externalReference,
        )
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    card = (await ctx.db.execute(stmt)).scalar_one_or_none()
    if card is not None and card.identity_id is None and lifecycle.is_due(ctx, card):
        await lifecycle.step(ctx, card)  # a card that expired in the pool is gone
    if card is None or card.identity_id is not None or card.state == cards.DESTROYED:
        raise Conflict("INSTRUMENT_NOT_FOUND")
    if card.activation_failures >= ACTIVATION_TRIES:
        # Locked: every code is refused alike, the right one included, so that the answers stop
        # telling a guesser anything; the operator hands out another card (decision 0074).
        raise Conflict("ACTIVATION_CODE_INVALID")
    expected = card.activation_code_hash or ""
    if not hmac.compare_digest(expected, keys.activation_hash(card.id, body.activationCode)):
        card.activation_failures += 1
        await ctx.db.flush()
        raise Conflict("ACTIVATION_CODE_INVALID").keeping_changes()  # the count is kept
    # Checked after the code, so that a wrong guess learns nothing about the card.
    if card.identity_type != owner.identity_type:
        raise Conflict("MODEL_CONSTRAINTS_VIOLATED")
    if body.cardholderMobileNumber is None:
        # 3-D Secure one-time codes go to this number; 3.29.1 has no other 3-D Secure setting.
        raise Conflict("THREEDS_DETAILS_NOT_PROVIDED")
    card.identity_id = owner.identity_id
    card.friendly_name = body.friendlyName
    card.name_on_card = body.nameOnCard
    card.name_on_card_line2 = body.nameOnCardLine2 or None
    card.cardholder_mobile = body.cardholderMobileNumber
    card.billing_address = body.billingAddress.model_dump(exclude_none=True)
    await ledger.open_account(ctx.db, ctx.programme.id, card.currency, ctx.now, account_id=card.id)
    await ctx.db.flush()
    row = await repo.get(ctx.db, ctx.programme.id, owner.identity_id, card.id)
    assert row is not None  # assigned to this owner just now, in this transaction
    return row
