"""Managed cards: creation for verified owners, details, block, unblock and removal (D18 to D24,
D28). Flushes, never commits."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime

from multibank.accounts import repository as accounts
from multibank.accounts.service import Owner
from multibank.cards import events, lifecycle, manufacturing
from multibank.cards import repository as repo
from multibank.cards.models import ManagedCard
from multibank.cards.schemas import DigitalWallets, ManagedCardCreate, ManagedCardUpdate
from multibank.identities import repository as identities
from multibank.identities.service import is_verified
from multibank.kernel.carddata import TOKEN_LENGTH, CardKeyring
from multibank.kernel.errors import Conflict, NotFound
from multibank.kernel.ids import new_id
from multibank.kernel.validation import parse_id
from multibank.ledger import service as ledger
from multibank.ledger.models import LedgerAccount
from multibank.programmes import repository as programmes
from multibank.programmes.context import Ctx

ACTIVE, BLOCKED, DESTROYED = "ACTIVE", "BLOCKED", "DESTROYED"
PREPAID, DEBIT = "PREPAID_MODE", "DEBIT_MODE"
MAX_PAGE = 100
# The card profile of each (identity type, mode) (D19).
CARD_PROFILES = {
    ("CORPORATE", PREPAID): "corporatePrepaidManagedCard",
    ("CORPORATE", DEBIT): "corporateDebitManagedCard",
    ("CONSUMER", PREPAID): "consumerPrepaidManagedCard",
    ("CONSUMER", DEBIT): "consumerDebitManagedCard",
}
# What every card profile fixes in this build (D19, D20): a Mastercard-shaped test range, never
# a live issuer's; 36 months from the creation month; no renewal unless the request asks.
SANDBOX_BIN = "555555"
CARD_BRAND = "MASTERCARD"
EXPIRY_PERIOD_MONTHS = 36
DEFAULT_RENEWAL = "NO_RENEW"
# Token fields: the number's token never changes; the CVV's follows the card's version.
NUMBER_FIELD, CVV_FIELD = "CARD_NUMBER", "CVV"
_HANDLE_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


def luhn_digit(partial: str) -> str:
    """The check digit that makes `partial` + it pass the Luhn check."""
    total = 0
    for i, ch in enumerate(reversed(partial)):
        d = int(ch)
        if i % 2 == 0:
            d = d * 2 - 9 if d * 2 > 9 else d * 2
        total += d
    return str((10 - total % 10) % 10)


def new_number() -> str:
    """The BIN, 9 random digits, the Luhn check digit (D20)."""
    partial = SANDBOX_BIN + "".join(secrets.choice("0123456789") for _ in range(9))
    return partial + luhn_digit(partial)


def new_handle() -> str:
    return "".join(secrets.choice(_HANDLE_ALPHABET) for _ in range(TOKEN_LENGTH))


def mmyy(now_ms: int, months_on: int = 0) -> str:
    start = datetime.fromtimestamp(now_ms / 1000, tz=UTC)
    index = start.year * 12 + start.month - 1 + months_on
    return f"{index % 12 + 1:02d}{(index // 12) % 100:02d}"


def renewal_of(requested: str | None) -> str:
    return (
        DEFAULT_RENEWAL
        if requested is None
        else ("NO_RENEW" if requested == "NO_RENEW" else "RENEW")
    )


def _switched_off(wallets: DigitalWallets | None, auth_forwarding: str | None) -> None:
    """Features every programme has switched off, refused with the description's codes (D18)."""
    if wallets is not None and (wallets.walletsEnabled or wallets.pushProvisioningEnabled):
        raise Conflict("WALLETS_NOT_ENABLED")
    if auth_forwarding is not None:
        raise Conflict("AUTH_FORWARDING_NOT_ENABLED")


async def create(ctx: Ctx, keys: CardKeyring, owner: Owner, data: ManagedCardCreate) -> ManagedCard:
    pid = parse_id(data.profileId)
    profile = None if pid is None else await programmes.get_profile(ctx.db, ctx.programme.id, pid)
    if profile is None or profile.kind not in CARD_PROFILES.values():
        raise Conflict("PROFILE_NOT_FOUND")
    if profile.kind != CARD_PROFILES[(owner.identity_type, data.mode)]:
        raise Conflict("PAYMENT_MODEL_CONSTRAINTS_VIOLATED")
    if not profile.active:
        raise Conflict("PROFILE_INACTIVE")
    identity = await identities.get(ctx.db, ctx.programme.id, owner.identity_id)
    if identity is None or not is_verified(identity):
        raise Conflict("OWNER_IDENTITY_NOT_VERIFIED")
    _switched_off(data.digitalWallets, data.authForwardingDefaultTimeoutDecision)
    if not ctx.sandbox:
        # No issuer adapter ships in this build (D29): no live card exists.
        raise Conflict("PROVIDER_NOT_SUPPORTED_BY_PROFILE")
    parent_id: int | None = None
    if data.mode == PREPAID:
        assert data.currency is not None  # the schema requires it for this mode
        if data.currency not in profile.currencies:
            raise Conflict("CURRENCY_NOT_SUPPORTED_BY_PROFILE")
        currency = data.currency
    else:
        if owner.identity_type == "CONSUMER" and identity.dd_level == "KYC_LEVEL_1":
            raise Conflict("IDENTITY_KYC_LEVEL_STEPUP_REQUIRED")
        aid = parse_id(data.parentManagedAccountId or "")
        parent = (
            None
            if aid is None
            else await accounts.get(ctx.db, ctx.programme.id, owner.identity_id, aid)
        )
        if parent is None:
            raise Conflict("PARENT_MANAGED_ACCOUNT_NOT_FOUND")
        if parent[0].state != ACTIVE:
            raise Conflict("PARENT_MANAGED_ACCOUNT_NOT_ACTIVE")
        parent_id, currency = parent[0].id, parent[0].currency
    card_id = new_id()
    if data.mode == PREPAID:
        # The card's own money (D23), with zero balances, as an account's.
        await ledger.open_account(ctx.db, ctx.programme.id, currency, ctx.now, account_id=card_id)
    number = new_number()
    while await repo.number_taken(ctx.db, ctx.programme.id, keys.lookup_hash(number)):
        number = new_number()
    card = ManagedCard(
        id=card_id,
        programme_id=ctx.programme.id,
        identity_id=owner.identity_id,
        identity_type=owner.identity_type,
        profile_id=profile.id,
        mode=data.mode,
        parent_account_id=parent_id,
        external_handle=new_handle(),
        friendly_name=data.friendlyName,
        tag=data.tag,
        currency=currency,
        state=ACTIVE,
        type="VIRTUAL",
        card_brand=CARD_BRAND,
        level=owner.identity_type,
        number_first_six=number[:6],
        number_last_four=number[-4:],
        number_hash=keys.lookup_hash(number),
        number_encrypted=keys.encrypt(number, card_id),
        version=1,
        name_on_card=data.nameOnCard,
        name_on_card_line2=data.nameOnCardLine2 or None,
        cardholder_mobile=data.cardholderMobileNumber,
        billing_address=data.billingAddress.model_dump(exclude_none=True),
        start_mmyy=mmyy(ctx.now),
        expiry_mmyy=mmyy(ctx.now, EXPIRY_PERIOD_MONTHS),
        expiry_period_months=EXPIRY_PERIOD_MONTHS,
        renewal_type=renewal_of(data.renewalType),
        created_at=ctx.now,
    )
    await draw_distinct_cvv_token(ctx, keys, card)
    lifecycle.schedule(card)
    ctx.db.add(card)
    await ctx.db.flush()
    return card


async def draw_distinct_cvv_token(ctx: Ctx, keys: CardKeyring, card: ManagedCard) -> None:
    """A new card's CVV token is none of its identity's other cards' (D21a): detokenize finds a
    CVV by its token within the identity, and 3 characters make a collision possible. One that
    collides is drawn again: a new version, so a new CVV that nobody has seen yet."""
    assert card.identity_id is not None
    taken = {
        keys.cvv_token(other, version)
        for other, version in await repo.card_versions(
            ctx.db, ctx.programme.id, card.identity_id, card.id
        )
    }
    while keys.cvv_token(card.id, card.version) in taken:
        card.version += 1


async def load(ctx: Ctx, owner: Owner, card_id: str, for_update: bool = False) -> repo.Row:
    """The owner's card; another identity's or an unknown one is 404 (D28)."""
    cid = parse_id(card_id)
    row = (
        None
        if cid is None
        else await repo.get(ctx.db, ctx.programme.id, owner.identity_id, cid, for_update)
    )
    if row is None:
        raise NotFound("Managed card not found")
    if manufacturing.is_due(ctx, row[0]):
        # A manufacturing step the programme clock made due is taken by the card's next read.
        await manufacturing.advance(ctx, row[0])
    return row


async def page(
    ctx: Ctx, owner: Owner, filters: repo.Filters, offset: int, limit: int | None
) -> tuple[int, list[repo.Row]]:
    async def read() -> tuple[int, list[repo.Row]]:
        return await repo.page(
            ctx.db,
            ctx.programme.id,
            owner.identity_id,
            filters,
            offset,
            min(limit or MAX_PAGE, MAX_PAGE),
        )

    total, rows = await read()
    due = [card for card, _ in rows if manufacturing.is_due(ctx, card)]
    if due:
        for card in due:
            await manufacturing.advance(ctx, card)
        # A step may take a card out of a manufacturing-state filter.
        total, rows = await read()
    return total, rows


async def update(ctx: Ctx, owner: Owner, card_id: str, data: ManagedCardUpdate) -> repo.Row:
    """Changes only the fields sent (cards.md §3.5)."""
    card, _ = await load(ctx, owner, card_id, for_update=True)
    sent = data.model_fields_set
    if card.state == DESTROYED:
        raise Conflict("INSTRUMENT_DESTROYED")
    if not card.upgraded and ({"deliveryAddress", "deliveryMethod"} & sent):
        # Delivery details belong to cards upgraded to physical, activated or not (§3.5).
        raise Conflict("INSTRUMENT_NOT_PHYSICAL")
    _switched_off(data.digitalWallets, data.authForwardingDefaultTimeoutDecision)
    if "tag" in sent:
        card.tag = data.tag
    if data.friendlyName is not None:
        card.friendly_name = data.friendlyName
    if data.nameOnCard:
        card.name_on_card = data.nameOnCard
    if "nameOnCardLine2" in sent:
        card.name_on_card_line2 = data.nameOnCardLine2 or None
    if data.cardholderMobileNumber is not None:
        card.cardholder_mobile = data.cardholderMobileNumber
    if data.billingAddress is not None:
        card.billing_address = data.billingAddress.model_dump(exclude_none=True)
    if data.deliveryAddress is not None:
        card.delivery_address = data.deliveryAddress.model_dump(exclude_none=True)
    if data.deliveryMethod is not None:
        card.delivery_method = data.deliveryMethod
    renewal_changed = False
    if data.renewalType is not None:
        renewal_changed = card.renewal_type != renewal_of(data.renewalType)
        card.renewal_type = renewal_of(data.renewalType)
    await ctx.db.flush()
    if renewal_changed:
        # A renewal-type change is a state_change event; the state itself is unchanged (D27).
        await events.state_change(ctx, card, events.ENABLED if card.state == ACTIVE else card.state)
    return await load(ctx, owner, card_id)


def _marked_lost_or_stolen(card: ManagedCard) -> bool:
    # `reported`: a user-blocked card reported lost keeps its USER reason (D25, physical.py).
    return (
        card.reported is not None
        or card.blocked_reason == "LOST"
        or card.destroyed_reason in ("LOST", "STOLEN")
    )


async def block(ctx: Ctx, owner: Owner, card_id: str) -> None:
    """A block by the user (reason USER); checks in the observed order (D24)."""
    card, _ = await load(ctx, owner, card_id, for_update=True)
    if _marked_lost_or_stolen(card):
        raise Conflict("INSTRUMENT_MARKED_LOST_STOLEN")
    if card.state == DESTROYED:
        raise Conflict("INSTRUMENT_DESTROYED")
    if card.state == BLOCKED:
        raise Conflict("INSTRUMENT_ALREADY_BLOCKED")
    card.state, card.blocked_reason = BLOCKED, "USER"
    await ctx.db.flush()
    await events.state_change(ctx, card, events.BLOCKED)


async def unblock(ctx: Ctx, owner: Owner, card_id: str) -> None:
    """Lifts the user's own block; a SYSTEM block is the operator's to lift (D24)."""
    card, _ = await load(ctx, owner, card_id, for_update=True)
    if _marked_lost_or_stolen(card):
        raise Conflict("INSTRUMENT_MARKED_LOST_STOLEN")
    if card.state == DESTROYED:
        raise Conflict("INSTRUMENT_DESTROYED")
    if card.state != BLOCKED:
        raise Conflict("INSTRUMENT_NOT_BLOCKED")
    if card.blocked_reason != "USER":
        raise Conflict("INSTRUMENT_INACTIVE")
    card.state, card.blocked_reason = ACTIVE, None
    await ctx.db.flush()
    await events.state_change(ctx, card, events.UNBLOCKED)


async def remove(ctx: Ctx, owner: Owner, card_id: str) -> None:
    """Irreversible; a prepaid card must hold nothing, held money included (D24)."""
    card, balance = await load(ctx, owner, card_id, for_update=True)
    if card.state == DESTROYED:
        raise Conflict("INSTRUMENT_ALREADY_REMOVED")
    if balance is not None and (balance.available != 0 or balance.actual != 0):
        raise Conflict("BALANCE_NOT_ZERO")
    card.state, card.blocked_reason, card.destroyed_reason = DESTROYED, None, "USER"
    card.spend_rules = None  # a destroyed card's rules are gone (D22)
    await ctx.db.flush()
    await events.state_change(ctx, card, events.DESTROYED)


async def linked_cards_block_removal(ctx: Ctx, account_id: int) -> None:
    """The card slice's rule for removing a managed account (`accounts.service.remove`): not
    while a debit card that is active or blocked spends it (D18)."""
    if await repo.has_linked_cards(ctx.db, ctx.programme.id, account_id):
        raise Conflict("INSTRUMENT_HAS_LINKED_CARDS")


def balances_of(ledger_account: LedgerAccount) -> dict[str, int]:
    return {"availableBalance": ledger_account.available, "actualBalance": ledger_account.actual}
