"""D22's checks of an authorisation, in order (cards.md §4.1): the card's standing (expiry,
state, amount, currency, card presence), its PIN, the card's own spend rules then its profile's,
and a debit card's spend limits, counted over the calendar windows of the programme clock
(`spent`: held plus settled plus fees minus refunds of the authorisations made in the window).
Reads, never writes, but for a PIN's count of wrong tries."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, case, func, select

from multibank.cards.authorisations import CardAuthorisation
from multibank.cards.models import ManagedCard
from multibank.cards.money.terms import (
    DEBIT,
    EXPIRY_FAILED,
    INACTIVE,
    MAX_AMOUNT,
    NOT_PERMITTED,
    NOT_PERMITTED_AMOUNT,
    PHYSICAL_NOT_ACTIVATED,
    PIN_BLOCKED,
    PIN_FAILED,
    PIN_TRIES,
    Attempt,
    Decline,
    spend_control,
)
from multibank.programmes.context import Ctx
from multibank.programmes.models import Profile

INTERVALS = ("DAILY", "WEEKLY", "MONTHLY", "QUARTERLY", "YEARLY", "ALWAYS")


# The programme's clock windows of spend limits (cards.md §4.1): calendar windows in UTC.


def window_start(interval: str, now_ms: int) -> int:
    if interval == "ALWAYS":
        return 0
    now = datetime.fromtimestamp(now_ms / 1000, tz=UTC)
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if interval == "DAILY":
        start = day
    elif interval == "WEEKLY":  # Monday to Sunday
        start = day - timedelta(days=day.weekday())
    elif interval == "MONTHLY":
        start = day.replace(day=1)
    elif interval == "QUARTERLY":
        start = day.replace(day=1, month=3 * ((day.month - 1) // 3) + 1)
    else:  # YEARLY
        start = day.replace(day=1, month=1)
    return int(start.timestamp() * 1000)


def limits_of(card: ManagedCard) -> list[dict[str, Any]]:
    """The card's spend limits; a debit card without one has the implicit ALWAYS 0 (D22)."""
    stored: list[dict[str, Any]] = (card.spend_rules or {}).get("spendLimit") or []
    return stored or [{"value": {"currency": card.currency, "amount": 0}, "interval": "ALWAYS"}]


def _spent_statement() -> Any:
    amount = (
        CardAuthorisation.open_amount
        + CardAuthorisation.settled_amount
        + CardAuthorisation.fee_amount
        - CardAuthorisation.refunded_amount
    )
    columns = [
        func.coalesce(
            func.sum(case((CardAuthorisation.created_at >= bindparam(f"s_{i}"), amount), else_=0)),
            0,
        ).label(f"spent_{i}")
        for i in range(len(INTERVALS))
    ]
    return select(*columns).where(CardAuthorisation.card_id == bindparam("card_id"))


# Built once with bound parameters: building it per authorisation cost more than running it.
SPENT = _spent_statement()


def spent_params(ctx: Ctx, card: ManagedCard) -> dict[str, Any]:
    params: dict[str, Any] = {
        f"s_{i}": window_start(interval, ctx.now) for i, interval in enumerate(INTERVALS)
    }
    params["card_id"] = card.id
    return params


def spent_of(values: Any) -> dict[str, int]:
    return {interval: int(value) for interval, value in zip(INTERVALS, values, strict=True)}


async def spent(ctx: Ctx, card: ManagedCard) -> dict[str, int]:
    """What the card spent in each interval's current window: held plus settled plus fees minus
    refunds of the authorisations made in the window (D22)."""
    return spent_of((await ctx.db.execute(SPENT, spent_params(ctx, card))).one())


async def available_to_spend(ctx: Ctx, card: ManagedCard) -> list[dict[str, Any]]:
    """A debit card's `availableToSpend`: each limit less what was spent in its window."""
    return to_spend_after(card, await spent(ctx, card))


def to_spend_after(card: ManagedCard, used: dict[str, int], more: int = 0) -> list[dict[str, Any]]:
    """`availableToSpend` from the spend of each window (`spent`), with `more` spent since in
    every window (a step just written: its authorisation is in every current window)."""
    return [
        {
            "value": {
                "currency": limit["value"]["currency"],
                "amount": int(limit["value"]["amount"]) - used[limit["interval"]] - more,
            },
            "interval": limit["interval"],
        }
        for limit in limits_of(card)
    ]


def past_expiry(card: ManagedCard, now_ms: int) -> bool:
    """Whether the programme clock has passed the end of the card's expiry month."""
    month, year = int(card.expiry_mmyy[:2]), 2000 + int(card.expiry_mmyy[2:])
    end = datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC)
    return now_ms >= int(end.timestamp() * 1000)


def _listed(rules: dict[str, Any], blocked: str, allowed: str, value: str) -> str | None:
    """Which list refuses `value`: the blocked one first, then the allowed one."""
    if value in (rules.get(blocked) or []):
        return "BLOCKED"
    allow = rules.get(allowed) or []
    if allow and value not in allow:
        return "NOT_ALLOWED"
    return None


def expired(card: ManagedCard, now_ms: int) -> bool:
    """Past its expiry (D22 #3): destroyed by its expiry, or not destroyed and past the end of
    its expiry month. So the answer is one whether or not the clock's step has destroyed the
    card yet (decision 0052)."""
    if card.state == "DESTROYED":
        return card.destroyed_reason == "EXPIRED"
    return past_expiry(card, now_ms)


def standing_decline(card: ManagedCard, attempt: Attempt, now_ms: int) -> Decline | None:
    """Checks 3 to 6 of D22, in order (the PIN itself is checked after them, `check_pin`)."""
    if expired(card, now_ms):
        return EXPIRY_FAILED
    if card.state != "ACTIVE":
        return INACTIVE
    if attempt.amount <= 0:
        return NOT_PERMITTED_AMOUNT
    if attempt.currency != card.currency or attempt.amount > MAX_AMOUNT:
        return NOT_PERMITTED  # no forex in this build
    if attempt.card_present:
        if not card.upgraded:
            return NOT_PERMITTED  # a virtual card cannot be present
        if card.type != "PHYSICAL":
            # Upgraded but never activated: online it pays (cards.md §5.4), present it cannot.
            return PHYSICAL_NOT_ACTIVATED
        if card.pin_blocked:
            return PIN_BLOCKED
    return None


async def check_pin(ctx: Ctx, card: ManagedCard, attempt: Attempt) -> Decline | None:
    """The PIN of a card-present purchase (D25), when one was given: a wrong one counts, the
    third in a row blocks the PIN; a right one sets the count back. The caller holds the
    card's row, and the count is kept though the attempt is declined."""
    if not attempt.card_present or attempt.pin_matches is None:
        return None
    if attempt.pin_matches:
        card.pin_failures = 0
        return None
    card.pin_failures += 1
    if card.pin_failures >= PIN_TRIES:
        card.pin_blocked = True
        await ctx.db.flush()
        return PIN_BLOCKED
    await ctx.db.flush()
    return PIN_FAILED


def spend_rule_decline(
    rules: dict[str, Any], attempt: Attempt, merchant: dict[str, Any]
) -> Decline | None:
    """Checks 7 to 11 of D22 against one level's rules: the card's own, then its profile's
    (a failure at either level declines, D22; decision 0052)."""
    for blocked, allowed, value, name in (
        (
            "blockedMerchantCategories",
            "allowedMerchantCategories",
            merchant["merchantCategoryCode"],
            "MERCHANT_CATEGORY",
        ),
        ("blockedMerchantIds", "allowedMerchantIds", merchant["merchantId"], "MERCHANT_ID"),
        (
            "blockedMerchantCountries",
            "allowedMerchantCountries",
            merchant["merchantTerminalCountry"],
            "MERCHANT_COUNTRY",
        ),
    ):
        refused = _listed(rules, blocked, allowed, value)
        if refused == "BLOCKED":
            return spend_control(f"{name}_BLOCKED")
        if refused == "NOT_ALLOWED":
            return spend_control(f"{name}_NOT_IN_ALLOWED_LIST")
    if attempt.atm and rules.get("allowAtm") is False:
        return spend_control("ATM_NOT_ALLOWED")
    if attempt.card_present and rules.get("allowContactless") is False:
        return spend_control("CONTACTLESS_NOT_ALLOWED")
    if not attempt.card_present and not attempt.atm and rules.get("allowECommerce") is False:
        return spend_control("ECOMMERCE_NOT_ALLOWED")
    low, high = rules.get("minTransactionAmount") or 0, rules.get("maxTransactionAmount") or 0
    if low and attempt.amount < low:
        return spend_control("MIN_TRANSACTION_AMOUNT_EXCEEDED")
    if high and attempt.amount > high:
        return spend_control("MAX_TRANSACTION_AMOUNT_EXCEEDED")
    return None


async def checked(
    ctx: Ctx,
    card: ManagedCard,
    attempt: Attempt,
    refused: Decline | None,
    profile_rules: dict[str, Any] | None = None,
    limits: bool = True,
) -> tuple[Attempt, dict[str, Any], Decline | None, dict[str, int] | None]:
    """D22's checks in order (see `authorise`): the attempt with its merchant fixed, the first
    refusal, and a debit card's spend in each window (read once; what follows is derived).
    `profile_rules`: the card profile's spend rules when the caller read them with the card;
    without `limits`, the spend limits are left to the caller (`purchase` reads the spend with
    its account locks)."""
    merchant = attempt.merchant()
    attempt = _with_merchant(attempt, merchant)
    refused = refused or standing_decline(card, attempt, ctx.now)
    if refused is None:
        refused = await check_pin(ctx, card, attempt)
    if refused is None:
        if profile_rules is None:
            profile_rules = await profile_spend_rules(ctx, card)
        for rules in (card.spend_rules or {}, profile_rules):
            refused = refused or spend_rule_decline(rules, attempt, merchant)
    used = None
    if refused is None and card.mode == DEBIT and limits:
        used = await spent(ctx, card)
        refused = over_limit(card, used, attempt.amount)
    return attempt, merchant, refused, used


def over_limit(card: ManagedCard, used: dict[str, int], amount: int) -> Decline | None:
    """D22's spend-limit check of a debit card, on its spend in each window (`spent`)."""
    if any(amount > limit["value"]["amount"] for limit in to_spend_after(card, used)):
        return spend_control("SPEND_LIMIT_EXCEEDED")
    return None


def _with_merchant(attempt: Attempt, merchant: dict[str, Any]) -> Attempt:
    """The attempt with its drawn merchant id fixed, so its events and rows agree."""
    return replace(
        attempt,
        merchant_id=merchant["merchantId"],
        merchant_category_code=merchant["merchantCategoryCode"],
    )


_PROFILE_RULES = select(Profile.spend_rules).where(Profile.id == bindparam("profile_id"))


async def profile_spend_rules(ctx: Ctx, card: ManagedCard) -> dict[str, Any]:
    """The card profile's spend rules (D22): what the operator set, or none."""
    params = {"profile_id": card.profile_id}
    found: dict[str, Any] | None = (
        await ctx.db.execute(_PROFILE_RULES, params)
    ).scalar_one_or_none()
    return dict(found or {})
