"""Physical cards (D21, D25, cards.md §3.9 to §3.13): upgrade, activation, PIN, replacement of a
damaged, lost or stolen card, contactless-limit reset. Flushes, never commits.

A card is *upgraded* once it has a manufacturing state, and *activated* once its `type` is
`PHYSICAL` (its first activation; a damaged replacement waits for activation again but stays
activated for these checks). Refusals are checked in one order throughout, the card's standing
before the operation's own conditions (decision 0047): never upgraded (`INSTRUMENT_NOT_PHYSICAL`),
then reported lost or stolen where the operation names it, then destroyed, then blocked, then
not activated, then what the operation itself needs.

The PIN and the activation code are never stored in clear: the PIN is encrypted as the number
is (its own associated-data label), the code kept as a keyed hash."""

from __future__ import annotations

import secrets
from typing import Any

from sqlalchemy import select

from multibank.accounts import repository as accounts
from multibank.accounts.service import Owner
from multibank.cards import events, lifecycle, manufacturing, service
from multibank.cards import repository as repo
from multibank.cards.models import CardDataToken, ManagedCard
from multibank.kernel.carddata import CardKeyring
from multibank.kernel.errors import Conflict, NotFound
from multibank.kernel.ids import new_id
from multibank.ledger import service as ledger
from multibank.programmes.context import Ctx

DEFAULT = "DEFAULT"  # the one product reference and carrier type of every card profile (D25)
STANDARD_DELIVERY = "STANDARD_DELIVERY"
PIN_FIELD = "PIN"
PIN_LABEL = "pin"  # associated data of an encrypted PIN
TOKEN_LABEL = "token"  # associated data of a tokenised value
LOST, STOLEN = "LOST", "STOLEN"
DAMAGED, LOST_STOLEN = "DAMAGED", "LOST_STOLEN"
REPLACEMENT_SUFFIX = " Replacement"
FRIENDLY_NAME_MAX = 50
BALANCE_TRANSFER = "LOST_STOLEN_REPLACEMENT_BALANCE_TRANSFER"

UPGRADE_CONFLICTS = (
    "INSTRUMENT_ALREADY_UPGRADED_TO_PHYSICAL",
    "PRODUCT_REFERENCE_INVALID",
    "CARRIER_TYPE_INVALID",
    "INSTRUMENT_DESTROYED",
    "INSTRUMENT_BLOCKED",
    "PARENT_MANAGED_ACCOUNT_BLOCKED",
    "PIN_INVALID_FORMAT",
)
ACTIVATE_CONFLICTS = (
    "INSTRUMENT_NOT_PHYSICAL",
    "INSTRUMENT_DESTROYED",
    "INSTRUMENT_BLOCKED",
    "INSTRUMENT_ALREADY_ACTIVATED",
    "ACTIVATION_CODE_INVALID",
)
PIN_GET_CONFLICTS = (
    "INSTRUMENT_NOT_PHYSICAL",
    "INSTRUMENT_DESTROYED",
    "INSTRUMENT_BLOCKED",
    "PHYSICAL_CARD_NOT_ACTIVATED",
    "PIN_TRIES_EXCEEDED",
)
PIN_UNBLOCK_CONFLICTS = (
    "INSTRUMENT_NOT_PHYSICAL",
    "INSTRUMENT_DESTROYED",
    "INSTRUMENT_BLOCKED",
    "PHYSICAL_CARD_NOT_ACTIVATED",
)
DAMAGED_CONFLICTS = (
    "INSTRUMENT_NOT_PHYSICAL",
    "INSTRUMENT_ALREADY_DESTROYED",
    "INSTRUMENT_MARKED_AS_LOST",
    "PHYSICAL_CARD_NOT_ACTIVATED",
    "INSTRUMENT_ALREADY_PENDING_REPLACEMENT",
)
LOST_CONFLICTS = (
    "INSTRUMENT_NOT_PHYSICAL",
    "INSTRUMENT_ALREADY_MARKED_LOST",
    "INSTRUMENT_ALREADY_MARKED_STOLEN",
    "INSTRUMENT_DESTROYED",
)
STOLEN_CONFLICTS = (
    "INSTRUMENT_NOT_PHYSICAL",
    "INSTRUMENT_ALREADY_MARKED_STOLEN",
    "INSTRUMENT_ALREADY_MARKED_LOST",
    "INSTRUMENT_DESTROYED",
    "PHYSICAL_CARD_NOT_ACTIVATED",
)
REPLACE_CONFLICTS = (
    "INSTRUMENT_NOT_PHYSICAL",
    "INSTRUMENT_ALREADY_REPLACED",
    "INSTRUMENT_NOT_MARKED_LOST_OR_STOLEN",
    "INSTRUMENT_DESTROYED",
    "PARENT_MANAGED_ACCOUNT_NOT_ACTIVE",
)
CONTACTLESS_CONFLICTS = (
    "INSTRUMENT_NOT_PHYSICAL",
    "INSTRUMENT_DESTROYED",
    "INSTRUMENT_BLOCKED",
    "PHYSICAL_CARD_NOT_ACTIVATED",
    "PHYSICAL_CARD_TYPE_NOT_SUPPORTED",
)


def activated(card: ManagedCard) -> bool:
    return card.type == "PHYSICAL"


def _physical(card: ManagedCard) -> None:
    if not card.upgraded:
        raise Conflict("INSTRUMENT_NOT_PHYSICAL")


def _usable(card: ManagedCard) -> None:
    """Upgraded, neither destroyed nor blocked (a lost card is blocked), and activated."""
    _physical(card)
    if card.state == service.DESTROYED:
        raise Conflict("INSTRUMENT_DESTROYED")
    if card.state == service.BLOCKED:
        raise Conflict("INSTRUMENT_BLOCKED")
    if not activated(card):
        raise Conflict("PHYSICAL_CARD_NOT_ACTIVATED")


async def _pin_of_token(ctx: Ctx, keys: CardKeyring, owner: Owner, token: str) -> str:
    """The PIN a `secure_session/tokenize` token stands for; 404 for a value that is not a PIN
    token of this programme open to the owner (observed: 404), 409 when it is not 4 digits."""
    row = (
        await ctx.db.execute(
            select(CardDataToken).where(
                CardDataToken.programme_id == ctx.programme.id,
                CardDataToken.token == token,
                CardDataToken.field == PIN_FIELD,
            )
        )
    ).scalar_one_or_none()
    if row is None or row.identity_id not in (None, owner.identity_id):
        raise NotFound("PIN token not found")
    value = keys.decrypt(row.value_encrypted, row.id, TOKEN_LABEL)
    if len(value) != 4 or not value.isdigit():
        raise Conflict("PIN_INVALID_FORMAT")
    return value


def random_pin() -> str:
    return f"{secrets.randbelow(10_000):04d}"


# Over 8 parameters: the upgrade body's fields, named at the call (cards.md §3).
async def upgrade(
    ctx: Ctx,
    keys: CardKeyring,
    owner: Owner,
    card_id: str,
    *,
    product_reference: str | None,
    carrier_type: str | None,
    delivery_method: str | None,
    delivery_address: dict[str, Any],
    activation_code: str,
    pin_token: str | None,
    name_on_card_line2: str | None,
) -> None:
    card, _ = await service.load(ctx, owner, card_id, for_update=True)
    if card.upgraded:
        raise Conflict("INSTRUMENT_ALREADY_UPGRADED_TO_PHYSICAL")
    if product_reference not in (None, DEFAULT):
        raise Conflict("PRODUCT_REFERENCE_INVALID")
    if carrier_type not in (None, DEFAULT):
        raise Conflict("CARRIER_TYPE_INVALID")
    if card.state == service.DESTROYED:
        raise Conflict("INSTRUMENT_DESTROYED")
    if card.state == service.BLOCKED:
        raise Conflict("INSTRUMENT_BLOCKED")
    if card.parent_account_id is not None:
        parent = await accounts.get(
            ctx.db, ctx.programme.id, owner.identity_id, card.parent_account_id
        )
        if parent is None or parent[0].state != service.ACTIVE:
            raise Conflict("PARENT_MANAGED_ACCOUNT_BLOCKED")
    pin = random_pin() if pin_token is None else await _pin_of_token(ctx, keys, owner, pin_token)
    card.product_reference = DEFAULT
    card.carrier_type = DEFAULT
    card.delivery_method = delivery_method or STANDARD_DELIVERY
    card.delivery_address = delivery_address
    card.activation_code_hash = keys.activation_hash(card.id, activation_code)
    card.pin_encrypted = keys.encrypt(pin, card.id, PIN_LABEL)
    card.pin_blocked = False
    card.replacement_id, card.replacement_reason = None, None
    if name_on_card_line2:
        card.name_on_card_line2 = name_on_card_line2
    await manufacturing.request(ctx, card)


async def activate(ctx: Ctx, keys: CardKeyring, owner: Owner, card_id: str, code: str) -> None:
    """In any manufacturing state (D25): the card turns PHYSICAL and DELIVERED."""
    card, _ = await service.load(ctx, owner, card_id, for_update=True)
    _physical(card)
    if card.state == service.DESTROYED:
        raise Conflict("INSTRUMENT_DESTROYED")
    if card.state == service.BLOCKED:
        raise Conflict("INSTRUMENT_BLOCKED")
    if not card.pending_activation:
        raise Conflict("INSTRUMENT_ALREADY_ACTIVATED")
    if card.activation_code_hash != keys.activation_hash(card.id, code):
        raise Conflict("ACTIVATION_CODE_INVALID")
    card.type = "PHYSICAL"
    await manufacturing.delivered(ctx, card)
    await events.state_change(ctx, card, events.ACTIVATED)


async def pin_token(ctx: Ctx, keys: CardKeyring, owner: Owner, card_id: str) -> str:
    """A token of the card's PIN (D21); the sandbox detokenises it for the owner."""
    card, _ = await service.load(ctx, owner, card_id)
    _usable(card)
    if card.pin_blocked:
        raise Conflict("PIN_TRIES_EXCEEDED")
    return keys.token(card.id, PIN_FIELD, 0)


async def pin_unblock(ctx: Ctx, owner: Owner, card_id: str) -> None:
    card, _ = await service.load(ctx, owner, card_id, for_update=True)
    _usable(card)
    card.pin_blocked = False
    card.pin_failures = 0  # three more wrong PINs block it again (D25)
    await ctx.db.flush()


async def pin_block(ctx: Ctx, card: ManagedCard) -> None:
    """The sandbox's `pin_block` (D26): as three wrong PINs would (the caller holds the row)."""
    _usable(card)
    card.pin_blocked = True
    await ctx.db.flush()


async def contactless_reset(ctx: Ctx, owner: Owner, card_id: str) -> None:
    """Only wearables have a contactless limit, and the sandbox makes none (D25)."""
    card, _ = await service.load(ctx, owner, card_id, for_update=True)
    _usable(card)
    raise Conflict("PHYSICAL_CARD_TYPE_NOT_SUPPORTED")


async def replace_damaged(
    ctx: Ctx, keys: CardKeyring, owner: Owner, card_id: str, code: str
) -> None:
    """The same card (id and number) is made again: REQUESTED, waiting for activation with the
    new code; it keeps working online meanwhile, and a blocked card stays blocked."""
    card, _ = await service.load(ctx, owner, card_id, for_update=True)
    _physical(card)
    if card.state == service.DESTROYED:
        raise Conflict("INSTRUMENT_ALREADY_DESTROYED")
    if card.reported == LOST:
        raise Conflict("INSTRUMENT_MARKED_AS_LOST")
    if not activated(card):
        raise Conflict("PHYSICAL_CARD_NOT_ACTIVATED")
    if card.pending_activation:
        raise Conflict("INSTRUMENT_ALREADY_PENDING_REPLACEMENT")
    card.activation_code_hash = keys.activation_hash(card.id, code)
    card.replacement_id, card.replacement_reason = card.id, DAMAGED
    await manufacturing.request(ctx, card)
    await events.replacement(ctx, card, card.id, DAMAGED)


async def report_lost(ctx: Ctx, owner: Owner, card_id: str) -> None:
    """BLOCKED with reason LOST (before activation too); a card blocked already keeps its
    reason (observed) and is marked lost all the same."""
    card, _ = await service.load(ctx, owner, card_id, for_update=True)
    _physical(card)
    if card.reported == LOST:
        raise Conflict("INSTRUMENT_ALREADY_MARKED_LOST")
    if card.reported == STOLEN:
        raise Conflict("INSTRUMENT_ALREADY_MARKED_STOLEN")
    if card.state == service.DESTROYED:
        raise Conflict("INSTRUMENT_DESTROYED")
    card.reported = LOST
    if card.state == service.ACTIVE:
        card.state, card.blocked_reason = service.BLOCKED, LOST
    await ctx.db.flush()
    await events.state_change(ctx, card, events.BLOCKED)


async def report_stolen(ctx: Ctx, owner: Owner, card_id: str) -> None:
    """DESTROYED with reason STOLEN (activated cards only). Its spend rules and money stay for
    the replacement, which takes them."""
    card, _ = await service.load(ctx, owner, card_id, for_update=True)
    _physical(card)
    if card.reported == STOLEN:
        raise Conflict("INSTRUMENT_ALREADY_MARKED_STOLEN")
    if card.reported == LOST:
        raise Conflict("INSTRUMENT_ALREADY_MARKED_LOST")
    if card.state == service.DESTROYED:
        raise Conflict("INSTRUMENT_DESTROYED")
    if not activated(card):
        raise Conflict("PHYSICAL_CARD_NOT_ACTIVATED")
    card.reported = STOLEN
    card.state, card.blocked_reason, card.destroyed_reason = service.DESTROYED, None, STOLEN
    card.manufacturing_due_at = None
    await ctx.db.flush()
    await events.state_change(ctx, card, events.DESTROYED)


def _replacement_name(name: str) -> str:
    return name[: FRIENDLY_NAME_MAX - len(REPLACEMENT_SUFFIX)] + REPLACEMENT_SUFFIX


async def _replacement(ctx: Ctx, keys: CardKeyring, card: ManagedCard, code: str) -> ManagedCard:
    """The lost or stolen card's replacement, made and flushed: new id, number, CVV and expiry,
    the old one's mode, owner, names, spend rules and PIN, manufacturing requested, waiting for
    activation with `code`."""
    new_card_id = new_id()
    if card.mode == service.PREPAID:
        await ledger.open_account(
            ctx.db, ctx.programme.id, card.currency, ctx.now, account_id=new_card_id
        )
    number = service.new_number()
    while await repo.number_taken(ctx.db, ctx.programme.id, keys.lookup_hash(number)):
        number = service.new_number()
    assert card.pin_encrypted is not None  # set at every upgrade
    pin = keys.decrypt(card.pin_encrypted, card.id, PIN_LABEL)
    new = ManagedCard(
        id=new_card_id,
        programme_id=card.programme_id,
        identity_id=card.identity_id,
        identity_type=card.identity_type,
        profile_id=card.profile_id,
        mode=card.mode,
        parent_account_id=card.parent_account_id,
        external_handle=service.new_handle(),
        friendly_name=_replacement_name(card.friendly_name),
        tag=card.tag,
        currency=card.currency,
        state=service.ACTIVE,
        type="VIRTUAL",
        card_brand=card.card_brand,
        level=card.level,
        number_first_six=number[:6],
        number_last_four=number[-4:],
        number_hash=keys.lookup_hash(number),
        number_encrypted=keys.encrypt(number, new_card_id),
        version=1,
        name_on_card=card.name_on_card,
        name_on_card_line2=card.name_on_card_line2,
        cardholder_mobile=card.cardholder_mobile,
        billing_address=card.billing_address,
        start_mmyy=service.mmyy(ctx.now),
        expiry_mmyy=service.mmyy(ctx.now, card.expiry_period_months),
        expiry_period_months=card.expiry_period_months,
        renewal_type=card.renewal_type,
        created_at=ctx.now,
        spend_rules=card.spend_rules,
        product_reference=card.product_reference,
        carrier_type=card.carrier_type,
        delivery_address=card.delivery_address,
        delivery_method=card.delivery_method,
        activation_code_hash=keys.activation_hash(new_card_id, code),
        pin_encrypted=keys.encrypt(pin, new_card_id, PIN_LABEL),
        pin_blocked=False,
    )
    lifecycle.schedule(new)  # its own expiry, from its creation (D24)
    await service.draw_distinct_cvv_token(ctx, keys, new)
    ctx.db.add(new)
    await ctx.db.flush()
    await manufacturing.request(ctx, new)
    return new


async def _move_balance(ctx: Ctx, card: ManagedCard, new: ManagedCard, moved: int) -> None:
    """A prepaid card's available balance onto its replacement: one ADJUSTMENT, each card's
    statement naming the other, and each card's event."""
    movement = await ledger.post(
        ctx.db,
        programme_id=ctx.programme.id,
        type_="ADJUSTMENT",
        legs=[
            ledger.Leg(card.id, card.currency, -moved, -moved),
            ledger.Leg(new.id, card.currency, moved, moved),
        ],
        now_ms=ctx.now,
        details={
            "cardId": str(new.id),
            "adjustmentType": BALANCE_TRANSFER,
            "relatedCardId": str(card.id),
            # Each card's statement names the other card.
            "byAccount": {
                str(card.id): {
                    "fields": {"adjustmentType": BALANCE_TRANSFER, "relatedCardId": str(new.id)}
                },
                str(new.id): {
                    "fields": {
                        "adjustmentType": BALANCE_TRANSFER,
                        "relatedCardId": str(card.id),
                    }
                },
            },
        },
    )
    old_left = (await ledger.balances(ctx.db, card.id))[0]
    await events.adjustment(ctx, card, movement.id, BALANCE_TRANSFER, -moved, old_left)
    await events.adjustment(ctx, new, movement.id, BALANCE_TRANSFER, moved, moved)


async def replace_lost_stolen(
    ctx: Ctx, keys: CardKeyring, owner: Owner, card_id: str, code: str
) -> repo.Row:
    """A new card (new id and number) with the old one's mode, spend rules and PIN, waiting for
    activation with `code`; a prepaid card's available balance moves to it in the same
    transaction (an ADJUSTMENT). The old card ends DESTROYED (LOST or STOLEN) naming its
    replacement. Answers the old card (observed)."""
    card, balance = await service.load(ctx, owner, card_id, for_update=True)
    _physical(card)
    if card.replacement_reason == LOST_STOLEN:
        raise Conflict("INSTRUMENT_ALREADY_REPLACED")
    if card.reported is None:
        raise Conflict("INSTRUMENT_NOT_MARKED_LOST_OR_STOLEN")
    if card.state == service.DESTROYED and card.destroyed_reason != card.reported:
        raise Conflict("INSTRUMENT_DESTROYED")  # removed by its owner after the report
    if card.parent_account_id is not None:
        parent = await accounts.get(
            ctx.db, ctx.programme.id, owner.identity_id, card.parent_account_id
        )
        if parent is None or parent[0].state != service.ACTIVE:
            raise Conflict("PARENT_MANAGED_ACCOUNT_NOT_ACTIVE")
    new = await _replacement(ctx, keys, card, code)
    moved = balance.available if balance is not None else 0
    if moved > 0:
        await _move_balance(ctx, card, new, moved)
    was_destroyed = card.state == service.DESTROYED
    card.state, card.blocked_reason = service.DESTROYED, None
    card.destroyed_reason = card.reported
    card.replacement_id, card.replacement_reason = new.id, LOST_STOLEN
    card.manufacturing_due_at = None
    card.spend_rules = None  # they went with the replacement; a destroyed card has none (D22)
    await ctx.db.flush()
    if not was_destroyed:
        await events.state_change(ctx, card, events.DESTROYED)
    await events.replacement(ctx, card, new.id, LOST_STOLEN)
    return await service.load(ctx, owner, card_id)
