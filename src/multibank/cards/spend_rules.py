"""A card's own spend rules: read, create, change, replace, delete (cards.md §4, D22). Stored in
their wire form on the card; evaluated at authorisation (D22's order), which is not here.
Flushes, never commits."""

from __future__ import annotations

from typing import Any

from multibank.accounts.service import Owner
from multibank.cards import service
from multibank.cards.models import ManagedCard
from multibank.cards.schemas import CardLevelSpendRules
from multibank.kernel.errors import Conflict, NotFound
from multibank.programmes import repository as programmes
from multibank.programmes.context import Ctx

LISTS = (
    "allowedMerchantCategories",
    "blockedMerchantCategories",
    "allowedMerchantIds",
    "blockedMerchantIds",
    "allowedMerchantCountries",
    "blockedMerchantCountries",
    "spendLimit",
)
NO_RULES = "Spend rules not found"


def stored_form(data: CardLevelSpendRules, fields: set[str]) -> dict[str, Any]:
    """The `fields` of `data` as stored: null values and null list items dropped, a list left
    empty by that maps to None (cleared)."""
    out: dict[str, Any] = {}
    dumped = data.model_dump(include=fields)
    for name in fields:
        value = dumped[name]
        if name in LISTS and value is not None:
            value = [item for item in value if item is not None] or None
        out[name] = value
    return out


# Lists no value may be in both of (decision 0073): the authorisation would decline the value
# (blocked wins, D22), so the allowed entry is a mistake the writer should hear of.
OPPOSITES = (
    ("allowedMerchantCategories", "blockedMerchantCategories"),
    ("allowedMerchantIds", "blockedMerchantIds"),
    ("allowedMerchantCountries", "blockedMerchantCountries"),
)
INVALID = "SPEND_RULE_INVALID"


def check(card: ManagedCard, rules: dict[str, Any]) -> None:
    """The 409s of a write: the spend limits' in the order D22 lists them, then rules that
    contradict each other (decision 0073)."""
    check_limits(card, rules.get("spendLimit") or [])
    low, high = rules.get("minTransactionAmount") or 0, rules.get("maxTransactionAmount") or 0
    if low and high and low > high:  # 0 or absent: no bound (cards.md §4.1)
        raise Conflict(INVALID, "minTransactionAmount is above maxTransactionAmount")
    for allowed, blocked in OPPOSITES:
        both = sorted(set(rules.get(allowed) or ()) & set(rules.get(blocked) or ()))
        if both:
            raise Conflict(INVALID, f"{', '.join(both)[:100]} both in {allowed} and {blocked}")


def check_limits(card: ManagedCard, limits: list[dict[str, Any]]) -> None:
    if not limits:
        return
    if card.mode == service.PREPAID:
        raise Conflict("SPEND_LIMIT_NOT_SUPPORTED_FOR_PREPAID_MODE_CARD")
    if any(limit["value"]["currency"] != card.currency for limit in limits):
        raise Conflict("SPEND_LIMIT_CURRENCY_DIFFERENT_FROM_CARD_CURRENCY")
    if len({limit["interval"] for limit in limits}) != len(limits):
        raise Conflict("SPEND_LIMIT_DUPLICATE_INTERVAL")
    if any(limit["value"]["amount"] < 0 for limit in limits):
        raise Conflict("SPEND_LIMIT_AMOUNT_INVALID")


def without_nones(rules: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in rules.items() if v is not None}


async def writable(ctx: Ctx, owner: Owner, card_id: str) -> ManagedCard:
    """The owner's card, locked; a destroyed card's rules are gone and it takes no new ones:
    it refuses as its other changes do (INSTRUMENT_DESTROYED), not as a card without rules."""
    card, _ = await service.load(ctx, owner, card_id, for_update=True)
    if card.state == service.DESTROYED:
        raise Conflict("INSTRUMENT_DESTROYED")
    return card


async def read(ctx: Ctx, owner: Owner, card_id: str) -> dict[str, Any]:
    """`AllLevelSpendRules`: the card level at top level and in `cardLevelSpendRules`."""
    card, _ = await service.load(ctx, owner, card_id)
    # A stolen card keeps its rules for its replacement (physical.py); destroyed, it has none,
    # nor does its profile's level show (observed: all levels empty).
    destroyed = card.state == service.DESTROYED
    rules = dict(card.spend_rules or {}) if not destroyed else {}
    profile = None
    if not destroyed:
        profile = await programmes.get_profile(ctx.db, ctx.programme.id, card.profile_id)
    return {
        **rules,
        "cardLevelSpendRules": rules,
        "profileLevelSpendRules": dict(profile.spend_rules or {}) if profile is not None else {},
        "identityLevelSpendRules": {},
    }


async def create(ctx: Ctx, owner: Owner, card_id: str, data: CardLevelSpendRules) -> None:
    card = await writable(ctx, owner, card_id)
    if card.spend_rules is not None:
        raise Conflict("SPEND_RULE_ALREADY_SET")
    rules = without_nones(stored_form(data, set(CardLevelSpendRules.model_fields)))
    check(card, rules)
    card.spend_rules = rules
    await ctx.db.flush()


async def update(ctx: Ctx, owner: Owner, card_id: str, data: CardLevelSpendRules) -> None:
    """Only the fields sent change; a null changes nothing, an emptied list clears (D22)."""
    card = await writable(ctx, owner, card_id)
    if card.spend_rules is None:
        raise NotFound(NO_RULES)
    sent = {name for name in data.model_fields_set if getattr(data, name) is not None}
    rules = without_nones({**card.spend_rules, **stored_form(data, sent)})
    check(card, rules)
    card.spend_rules = rules
    await ctx.db.flush()


async def replace(
    ctx: Ctx, owner: Owner, card_id: str, data: CardLevelSpendRules
) -> dict[str, Any]:
    """Replaces every rule (deprecated PUT); the answer is what is stored."""
    card = await writable(ctx, owner, card_id)
    rules = without_nones(stored_form(data, set(CardLevelSpendRules.model_fields)))
    check(card, rules)
    card.spend_rules = rules
    await ctx.db.flush()
    return rules


async def delete(ctx: Ctx, owner: Owner, card_id: str) -> None:
    card = await writable(ctx, owner, card_id)
    if card.spend_rules is None:
        raise NotFound(NO_RULES)
    card.spend_rules = None
    await ctx.db.flush()
