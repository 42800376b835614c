"""Card payments on the ledger (D22, D23, decision 0045): authorise, settle, reverse, expire and
refund, each ONE ledger transaction of plain postings plus one `card_movements` row, and the
state of each approved authorisation's hold in `card_authorisations`.

Where the money is: a prepaid card's ledger account (the card's id) or a debit card's parent
account (the spending account). A hold moves the held amount from the spending account's
available balance to its reserved book (`CARD_RESERVED`, one system account per spending account
and currency); every later step takes from that book what it closes. So at all times the
book's available balance is the sum of the open amounts of its account's open authorisations,
and the spending account's actual minus available includes exactly those (`ledger verify`).

Concurrency: an authorisation locks its card's row (spend limits are read, then decided) and
takes the funds through the guarded ledger update, in a savepoint, so a refused guard leaves
nothing behind; a settlement, reversal or expiry locks the authorisation's row and checks its
state, so each closes the hold once. A step whose fee depends on the balance (settlement,
refund) locks its ledger rows in id order first, the order every movement locks them in.
Flushes, never commits."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pycountry
from sqlalchemy import Table, bindparam, case, func, or_, select, true, update

from multibank.cards import events
from multibank.cards.authorisations import (
    COMPLETED,
    EXPIRED,
    PENDING_SETTLEMENT,
    REVERSED,
    CardAuthorisation,
)
from multibank.cards.fees import ATM_WITHDRAWAL, PURCHASE, REFUND, card_fee
from multibank.cards.models import CardMovement, ManagedCard
from multibank.kernel.ids import new_id
from multibank.ledger import service as ledger
from multibank.ledger.models import REVENUE, LedgerAccount, LedgerTransaction
from multibank.programmes.context import Ctx
from multibank.programmes.models import Profile

PREPAID, DEBIT = "PREPAID_MODE", "DEBIT_MODE"
# Ledger account kinds of card money (D23): a spending account's reserved book, and the
# programme's card scheme settlement account per currency (merchant money leaves, refunds enter).
CARD_RESERVED = "CARD_RESERVED"
CARD_SCHEME = "CARD_SCHEME"
# Ledger transaction types (the shared contract).
AUTHORISATION = "AUTHORISATION"
SETTLEMENT = "SETTLEMENT"
AUTHORISATION_REVERSAL = "AUTHORISATION_REVERSAL"
AUTHORISATION_EXPIRY = "AUTHORISATION_EXPIRY"
MERCHANT_REFUND = "MERCHANT_REFUND"
# Profile's authorisation expiry (D19, D24): 7 days on the programme clock.
AUTHORISATION_TTL_MS = 7 * 86400 * 1000
DEFAULT_MERCHANT_NAME = "Multibank Test Merchant"
DEFAULT_MCC = "5399"
ATM_MCC = "6011"
DEFAULT_COUNTRY = "MT"
SALE_PURCHASE, PURCHASE_REFUND, CASH_WITHDRAWAL = (
    "SALE_PURCHASE",
    "PURCHASE_REFUND",
    "CASH_WITHDRAWAL",
)

# Simulator codes (cards.md §6.1, D26)
APPROVED = "APPROVED"
CODE_COMPLETED = "COMPLETED"
DENIED_CARD_NOT_FOUND = "DENIED_CARD_NOT_FOUND"
DENIED_CARD_EXPIRY = "DENIED_CARD_EXPIRY"
DENIED_INCORRECT_CVV = "DENIED_INCORRECT_CVV"
DENIED_CARD_INACTIVE = "DENIED_CARD_INACTIVE"
DENIED_AMOUNT_NOT_POSITIVE = "DENIED_AMOUNT_NOT_POSITIVE"
DENIED_OTHER = "DENIED_OTHER"
DENIED_SPEND_CONTROL = "DENIED_SPEND_CONTROL"
DENIED_NOT_ENOUGH_FUNDS = "DENIED_NOT_ENOUGH_FUNDS"
DENIED_AUTHORISATION_NOT_FOUND = "DENIED_AUTHORISATION_NOT_FOUND"
DENIED_AUTHORISATION_NOT_PENDING = "DENIED_AUTHORISATION_NOT_PENDING"

# The largest amount one card step moves (minor units): a bound no card scheme reaches, well
# inside the 64-bit balances; a larger one is refused as not permitted, never an overflow.
MAX_AMOUNT = 10**12

INTERVALS = ("DAILY", "WEEKLY", "MONTHLY", "QUARTERLY", "YEARLY", "ALWAYS")


@dataclass(frozen=True)
class Decline:
    """A refused authorisation: the simulator's code and the webhook's reasons (D22's table)."""

    code: str
    reason: str
    rule: str = "NONE"


def spend_control(rule: str) -> Decline:
    return Decline(DENIED_SPEND_CONTROL, "AUTH_RULE_CHECKS_FAILED", rule)


EXPIRY_FAILED = Decline(DENIED_CARD_EXPIRY, "CARD_EXPIRY_CHECKS_FAILED")
CVV_FAILED = Decline(DENIED_INCORRECT_CVV, "CVV_CHECKS_FAILED")
NOT_PERMITTED_AMOUNT = Decline(DENIED_AMOUNT_NOT_POSITIVE, "TRANSACTION_NOT_PERMITTED")
NOT_PERMITTED = Decline(DENIED_OTHER, "TRANSACTION_NOT_PERMITTED")
INACTIVE = Decline(DENIED_CARD_INACTIVE, "CARD_STATUS_NOT_ALLOWED")
PHYSICAL_NOT_ACTIVATED = Decline(DENIED_CARD_INACTIVE, "PHYSICAL_NOT_ACTIVATED")
PIN_FAILED = Decline(DENIED_OTHER, "PIN_CHECKS_FAILED")
PIN_BLOCKED = Decline(DENIED_OTHER, "PIN_RETRIES_EXCEEDED")
# Wrong PINs in a row that block the PIN (D25).
PIN_TRIES = 3
NOT_ENOUGH_FUNDS = Decline(DENIED_NOT_ENOUGH_FUNDS, "INSUFFICIENT_BALANCE")


@dataclass(frozen=True)
class Attempt:
    """What a merchant asks: an amount in a currency, its own fields, how the card is used."""

    currency: str
    amount: int
    merchant_name: str = DEFAULT_MERCHANT_NAME
    merchant_id: str | None = None
    merchant_category_code: str | None = None
    country_alpha3: str | None = None
    atm: bool = False
    card_present: bool = False
    cardholder_present: str | None = None
    extra_merchant: dict[str, str] = field(default_factory=dict)
    # A card-present purchase's PIN (the simulator's `pin`, a multibank extension, D25): None
    # when none was given, else whether it is the card's.
    pin_matches: bool | None = None

    def merchant(self) -> dict[str, Any]:
        """The stored merchant fields, defaults filled in (D26): a random 9-digit id, MCC 5399
        (6011 for an ATM withdrawal; an MCC that is not 4 digits is replaced too), country MT."""
        mcc = self.merchant_category_code
        if self.atm:
            mcc = ATM_MCC
        elif mcc is None or not (len(mcc) == 4 and mcc.isdigit()):
            mcc = DEFAULT_MCC
        return {
            "merchantName": self.merchant_name,
            "merchantId": self.merchant_id or f"{secrets.randbelow(900_000_000) + 100_000_000}",
            "merchantCategoryCode": mcc,
            "merchantTerminalCountry": alpha2(self.country_alpha3),
            "merchantTransactionType": CASH_WITHDRAWAL if self.atm else SALE_PURCHASE,
            "cardPresent": self.card_present,
            "cardholderPresent": self.cardholder_present or "PRESENT",
            **({"extra": self.extra_merchant} if self.extra_merchant else {}),
        }


def alpha2(alpha3: str | None) -> str:
    """The merchant country as the statement shows it (alpha-2); unknown codes keep the
    default's place (MT), as an absent one does."""
    if not alpha3:
        return DEFAULT_COUNTRY
    found = pycountry.countries.get(alpha_3=alpha3.upper()) if len(alpha3) == 3 else None
    if found is None and len(alpha3) == 2:
        found = pycountry.countries.get(alpha_2=alpha3.upper())
    return str(found.alpha_2) if found is not None else DEFAULT_COUNTRY


@dataclass
class Outcome:
    """A step's answer: the simulator's code and the ids of what was recorded."""

    code: str
    authorisation_id: int | None = None
    settlement_id: int | None = None
    reversal_id: int | None = None
    refund_id: int | None = None


def spending_account(card: ManagedCard) -> int:
    """The ledger account whose money the card spends (D23)."""
    if card.mode == DEBIT:
        assert card.parent_account_id is not None
        return card.parent_account_id
    return card.id


def auth_code() -> str:
    return f"{secrets.randbelow(1_000_000):06d}"


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
_SPENT = _spent_statement()


def _spent_params(ctx: Ctx, card: ManagedCard) -> dict[str, Any]:
    params: dict[str, Any] = {
        f"s_{i}": window_start(interval, ctx.now) for i, interval in enumerate(INTERVALS)
    }
    params["card_id"] = card.id
    return params


def _spent_of(values: Any) -> dict[str, int]:
    return {interval: int(value) for interval, value in zip(INTERVALS, values, strict=True)}


async def spent(ctx: Ctx, card: ManagedCard) -> dict[str, int]:
    """What the card spent in each interval's current window: held plus settled plus fees minus
    refunds of the authorisations made in the window (D22)."""
    return _spent_of((await ctx.db.execute(_SPENT, _spent_params(ctx, card))).one())


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


# Ledger accounts of card money


def _reserved_key(ctx: Ctx, account_id: int) -> str:
    return f"{ctx.programme.id}:{CARD_RESERVED}:{account_id}"


async def reserved_book(ctx: Ctx, account_id: int, currency: str) -> int:
    """The spending account's reserved book: the counterpart of its card holds. One per
    spending account, so under a key of its own, not one of `ledger.system_account`'s (one per
    programme, kind and currency)."""
    key = _reserved_key(ctx, account_id)
    return await ledger.keyed_account(
        ctx.db, ctx.programme.id, CARD_RESERVED, currency, key, ctx.now
    )


async def scheme_account(ctx: Ctx, account_id: int, currency: str) -> int:
    """The programme's card scheme settlement account in `currency` (D23): one of its shards,
    picked by the spending account as revenue's is, so purchases of different accounts do not
    wait on one row's lock. The scheme's balance is the sum of its shards (shard 0 keeps the
    unsharded account's key)."""
    return await ledger.system_account(
        ctx.db,
        ctx.programme.id,
        CARD_SCHEME,
        currency,
        ctx.now,
        shard=ledger.revenue_shard(account_id),
    )


async def revenue_account(ctx: Ctx, account_id: int, currency: str) -> int:
    return await ledger.system_account(
        ctx.db,
        ctx.programme.id,
        REVENUE,
        currency,
        ctx.now,
        shard=ledger.revenue_shard(account_id),
    )


async def _lock_accounts(ctx: Ctx, ids: list[int]) -> None:
    """Row locks on the ledger accounts, in id order (the order `ledger.post` takes them in),
    so the balance read next is the one the movement will change."""
    for account_id in sorted(set(ids)):
        stmt = select(LedgerAccount.id).where(LedgerAccount.id == account_id).with_for_update()
        await ctx.db.execute(stmt)


# The accounts of a purchase locked in one statement: the rows come locked in id order (the
# locking step takes them from the sort), the order every movement takes them in, and the
# reserved book is found by its key in the same statement. The three ids (spending account,
# scheme and revenue shards) are three parameters, not an expanding list, which SQLAlchemy
# renders again at every execution.
_PURCHASE_ACCOUNTS = or_(
    LedgerAccount.id.in_([bindparam("id_0"), bindparam("id_1"), bindparam("id_2")]),
    LedgerAccount.system_key == bindparam("book_key"),
)
_LOCK_PURCHASE = (
    select(LedgerAccount.id, LedgerAccount.available, LedgerAccount.system_key)
    .where(_PURCHASE_ACCOUNTS)
    .order_by(LedgerAccount.id)
    .with_for_update()
)


# The same, with a debit card's spend in each window read in the statement (decision 0060): the
# card's row is locked already (`_CARD` of the simulator), so every earlier step of the card has
# committed and this statement's snapshot holds it. Only the accounts' rows are locked.
_SPENT_NOW = _SPENT.subquery("spent")
_LOCK_PURCHASE_SPENT = (
    select(
        LedgerAccount.id,
        LedgerAccount.available,
        LedgerAccount.system_key,
        *(_SPENT_NOW.c[f"spent_{i}"] for i in range(len(INTERVALS))),
    )
    .join(_SPENT_NOW, true())
    .where(_PURCHASE_ACCOUNTS)
    .order_by(LedgerAccount.id)
    .with_for_update(of=LedgerAccount)
)


async def _lock_purchase(
    ctx: Ctx, card: ManagedCard, account_id: int, scheme: int, revenue: int
) -> tuple[int, int, dict[str, int] | None]:
    """Locks the spending account, its reserved book, the scheme and revenue accounts in id
    order; returns the book's id, the spending account's available balance as the lock found it
    and a debit card's spend in each window (`spent`; None for a prepaid card)."""
    key = _reserved_key(ctx, account_id)
    params: dict[str, Any] = {
        "id_0": account_id,
        "id_1": scheme,
        "id_2": revenue,
        "book_key": key,
    }
    statement = _LOCK_PURCHASE
    if card.mode == DEBIT:
        params.update(_spent_params(ctx, card))
        statement = _LOCK_PURCHASE_SPENT
    rows = (await ctx.db.execute(statement, params)).all()
    if not any(row.system_key == key for row in rows):
        # The account's first card hold: its book is created (by this transaction or a
        # concurrent one), then everything is locked again in id order.
        await reserved_book(ctx, account_id, card.currency)
        rows = (await ctx.db.execute(statement, params)).all()
    book = next(int(row.id) for row in rows if row.system_key == key)
    available = next(int(row.available) for row in rows if row.id == account_id)
    used = _spent_of(rows[0][3:]) if card.mode == DEBIT else None
    return book, available, used


async def available_of(ctx: Ctx, account_id: int) -> int:
    stmt = select(LedgerAccount.available).where(LedgerAccount.id == account_id)
    return int((await ctx.db.execute(stmt.execution_options(populate_existing=True))).scalar_one())


async def _movement(ctx: Ctx, card: ManagedCard, transaction_id: int, kind: str) -> None:
    ctx.db.add(
        CardMovement(
            transaction_id=transaction_id,
            programme_id=ctx.programme.id,
            card_id=card.id,
            account_id=spending_account(card),
            kind=kind,
            created_at=ctx.now,
        )
    )
    await ctx.db.flush()


async def _set_state(ctx: Ctx, transaction_id: int, state: str) -> None:
    await ctx.db.execute(
        update(LedgerTransaction).where(LedgerTransaction.id == transaction_id).values(state=state)
    )


def _details(
    card: ManagedCard, merchant: dict[str, Any], code: str, amount: int, fee: int
) -> dict[str, Any]:
    """The ledger transaction's details (the shared contract): merchant fields, the signed
    transaction amount from the cardholder's side, the fee this step charged."""
    return {
        "cardId": str(card.id),
        "merchantName": merchant["merchantName"],
        "merchantCategoryCode": merchant["merchantCategoryCode"],
        "merchantId": merchant["merchantId"],
        "merchantTerminalCountry": merchant["merchantTerminalCountry"],
        "merchantTransactionType": merchant["merchantTransactionType"],
        "authorisationCode": code,
        "transactionAmount": {"currency": card.currency, "amount": amount},
        "cardholderFee": fee,
    }


async def _balances_for_event(
    ctx: Ctx, card: ManagedCard
) -> tuple[int | None, list[dict[str, Any]] | None]:
    """What an event says the card can still use: a prepaid card's available balance, or a
    debit card's availableToSpend."""
    if card.mode == DEBIT:
        return None, await available_to_spend(ctx, card)
    return await available_of(ctx, card.id), None


# The steps


async def decline(ctx: Ctx, card: ManagedCard, attempt: Attempt, refused: Decline) -> Outcome:
    """A refused authorisation moves nothing; only its webhook event is written (D23, D27)."""
    balance, to_spend = await _balances_for_event(ctx, card)
    await events.authorisation(
        ctx,
        card,
        transaction_id=new_id(),
        authorisation_type="DECLINED",
        amount=-attempt.amount,
        merchant=attempt.merchant(),
        approved=False,
        decline_reason=refused.reason,
        rule_failed=refused.rule,
        auth_code=auth_code(),
        available_balance=balance,
        available_to_spend=to_spend,
        related_authorisation_id=None,
        currency=attempt.currency,
    )
    return Outcome(refused.code)


async def _checked(
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


async def authorise(
    ctx: Ctx, card: ManagedCard, attempt: Attempt, refused: Decline | None = None
) -> tuple[Outcome, CardAuthorisation | None]:
    """Checks D22's table in order (the caller has done #1 and #2, passing #2's failure as
    `refused`, and holds the card's row lock); an approved authorisation holds the amount."""
    attempt, merchant, refused, _ = await _checked(ctx, card, attempt, refused)
    if refused is not None:
        return await decline(ctx, card, attempt, refused), None
    account_id = spending_account(card)
    book = await reserved_book(ctx, account_id, card.currency)
    auth_id, code = new_id(), auth_code()
    details = _details(card, merchant, code, -attempt.amount, 0)
    details["authorisationId"] = str(auth_id)
    details["forexPaddingCurrency"] = card.currency
    details["forexPaddingAmount"] = "0"
    try:
        # The funds check is the guarded update (D22 #13); in a savepoint, so a refused guard
        # leaves nothing of the movement behind.
        async with ctx.db.begin_nested():
            await ledger.post(
                ctx.db,
                programme_id=ctx.programme.id,
                type_=AUTHORISATION,
                legs=[
                    ledger.Leg(account_id, card.currency, -attempt.amount, 0),
                    ledger.Leg(book, card.currency, attempt.amount, 0, guarded=False),
                ],
                now_ms=ctx.now,
                state="PENDING",
                details=details,
                transaction_id=auth_id,
            )
    except ledger.InsufficientFunds:
        return await decline(ctx, card, attempt, NOT_ENOUGH_FUNDS), None
    auth = CardAuthorisation(
        id=auth_id,
        programme_id=ctx.programme.id,
        card_id=card.id,
        account_id=account_id,
        reserved_account_id=book,
        currency=card.currency,
        held_amount=attempt.amount,
        open_amount=attempt.amount,
        settled_amount=0,
        fee_amount=0,
        refunded_amount=0,
        state=PENDING_SETTLEMENT,
        auth_code=code,
        merchant=merchant,
        settlement_id=None,
        expires_at=ctx.now + AUTHORISATION_TTL_MS,
        created_at=ctx.now,
    )
    ctx.db.add(auth)
    await _movement(ctx, card, auth_id, AUTHORISATION)
    balance, to_spend = await _balances_for_event(ctx, card)
    await events.authorisation(
        ctx,
        card,
        transaction_id=auth_id,
        authorisation_type="AUTHORISED",
        amount=-attempt.amount,
        merchant=merchant,
        approved=True,
        decline_reason="NO_REASON",
        rule_failed="NONE",
        auth_code=code,
        available_balance=balance,
        available_to_spend=to_spend,
        related_authorisation_id=None,
    )
    return Outcome(APPROVED, authorisation_id=auth_id), auth


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


async def locked_authorisation(
    ctx: Ctx, card: ManagedCard, authorisation_id: int
) -> CardAuthorisation | None:
    """The card's authorisation, its row locked: a step on it happens once (D23)."""
    stmt = (
        select(CardAuthorisation)
        .where(
            CardAuthorisation.id == authorisation_id,
            CardAuthorisation.card_id == card.id,
            CardAuthorisation.programme_id == ctx.programme.id,
        )
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    return (await ctx.db.execute(stmt)).scalar_one_or_none()


def _fee_kind(auth: CardAuthorisation) -> str:
    return (
        ATM_WITHDRAWAL
        if auth.merchant.get("merchantTransactionType") == CASH_WITHDRAWAL
        else PURCHASE
    )


async def settle(
    ctx: Ctx, card: ManagedCard, auth: CardAuthorisation | None, amount: int | None = None
) -> Outcome:
    """Settles `amount` (default: what is still held) and closes the hold: less than held
    releases the rest, more takes only what the available balance covers (D23). The fee is
    charged here, never below a zero balance."""
    if auth is None:
        return Outcome(DENIED_AUTHORISATION_NOT_FOUND)
    if auth.state != PENDING_SETTLEMENT:
        return Outcome(DENIED_AUTHORISATION_NOT_PENDING, authorisation_id=auth.id)
    settled = auth.open_amount if amount is None else amount
    if settled <= 0:
        return Outcome(DENIED_AMOUNT_NOT_POSITIVE, authorisation_id=auth.id)
    held = auth.open_amount
    scheme = await scheme_account(ctx, auth.account_id, auth.currency)
    revenue = await revenue_account(ctx, auth.account_id, auth.currency)
    await _lock_accounts(ctx, [auth.account_id, auth.reserved_account_id, scheme, revenue])
    left = await available_of(ctx, auth.account_id) + held - settled
    if left < 0:
        return Outcome(DENIED_NOT_ENOUGH_FUNDS, authorisation_id=auth.id)
    fee = max(0, min(card_fee(ctx.programme, _fee_kind(auth), auth.currency), left))
    settlement_id = new_id()
    details = _details(card, auth.merchant, auth.auth_code, -settled, fee)
    details["authorisationId"] = str(auth.id)
    details["authorisationRelatedId"] = str(auth.id)
    legs = [
        ledger.Leg(auth.reserved_account_id, auth.currency, -held, 0, guarded=False),
        ledger.Leg(auth.account_id, auth.currency, held - settled - fee, -(settled + fee)),
        ledger.Leg(scheme, auth.currency, settled, settled, guarded=False),
    ]
    if fee:
        legs.append(ledger.Leg(revenue, auth.currency, fee, fee, guarded=False))
    await ledger.post(
        ctx.db,
        programme_id=ctx.programme.id,
        type_=SETTLEMENT,
        legs=legs,
        now_ms=ctx.now,
        details=details,
        transaction_id=settlement_id,
    )
    auth.open_amount = 0
    auth.settled_amount = settled
    auth.fee_amount += fee
    auth.state = COMPLETED
    auth.settlement_id = settlement_id
    await _set_state(ctx, auth.id, COMPLETED)
    await _movement(ctx, card, settlement_id, SETTLEMENT)
    balance, to_spend = await _balances_for_event(ctx, card)
    await events.settlement(
        ctx,
        card,
        transaction_id=settlement_id,
        settlement_type=auth.merchant.get("merchantTransactionType", SALE_PURCHASE),
        amount=-settled,
        fee=fee,
        merchant=auth.merchant,
        auth_code=auth.auth_code,
        available_balance=balance,
        available_to_spend=to_spend,
        related_authorisation_id=auth.id,
        related_settlement_id=None,
    )
    return Outcome(CODE_COMPLETED, authorisation_id=auth.id, settlement_id=settlement_id)


async def _release(
    ctx: Ctx,
    card: ManagedCard,
    auth: CardAuthorisation,
    amount: int,
    type_: str,
    end_state: str,
) -> int:
    """Gives `amount` of the hold back to the spending account; the authorisation ends in
    `end_state` once nothing is held."""
    step_id = new_id()
    details = _details(card, auth.merchant, auth.auth_code, amount, 0)
    details["authorisationId"] = str(auth.id)
    details["authorisationRelatedId"] = str(auth.id)
    await ledger.post(
        ctx.db,
        programme_id=ctx.programme.id,
        type_=type_,
        legs=[
            ledger.Leg(auth.reserved_account_id, auth.currency, -amount, 0, guarded=False),
            ledger.Leg(auth.account_id, auth.currency, amount, 0),
        ],
        now_ms=ctx.now,
        details=details,
        transaction_id=step_id,
    )
    auth.open_amount -= amount
    if auth.open_amount == 0:
        auth.state = end_state
        await _set_state(ctx, auth.id, end_state)
    await _movement(ctx, card, step_id, type_)
    balance, to_spend = await _balances_for_event(ctx, card)
    await events.authorisation(
        ctx,
        card,
        transaction_id=step_id,
        authorisation_type="ONLINE_REVERSE" if type_ == AUTHORISATION_REVERSAL else "EXPIRED",
        amount=amount,
        merchant=auth.merchant,
        approved=True,
        decline_reason="NO_REASON",
        rule_failed="NONE",
        auth_code=auth.auth_code,
        available_balance=balance,
        available_to_spend=to_spend,
        related_authorisation_id=auth.id,
    )
    return step_id


async def reverse(
    ctx: Ctx, card: ManagedCard, auth: CardAuthorisation | None, amount: int | None = None
) -> Outcome:
    """Gives back `amount` of the hold (default and at most: all that is still held)."""
    if auth is None:
        return Outcome(DENIED_AUTHORISATION_NOT_FOUND)
    if auth.state != PENDING_SETTLEMENT:
        return Outcome(DENIED_AUTHORISATION_NOT_PENDING, authorisation_id=auth.id)
    if amount is not None and amount <= 0:
        return Outcome(DENIED_AMOUNT_NOT_POSITIVE, authorisation_id=auth.id)
    back = auth.open_amount if amount is None else min(amount, auth.open_amount)
    step_id = await _release(ctx, card, auth, back, AUTHORISATION_REVERSAL, REVERSED)
    return Outcome(CODE_COMPLETED, authorisation_id=auth.id, reversal_id=step_id)


async def expire(ctx: Ctx, card: ManagedCard, auth: CardAuthorisation | None) -> Outcome:
    """Releases what the authorisation still holds as an expiry (D24)."""
    if auth is None:
        return Outcome(DENIED_AUTHORISATION_NOT_FOUND)
    if auth.state != PENDING_SETTLEMENT:
        return Outcome(DENIED_AUTHORISATION_NOT_PENDING, authorisation_id=auth.id)
    await _release(ctx, card, auth, auth.open_amount, AUTHORISATION_EXPIRY, EXPIRED)
    return Outcome(CODE_COMPLETED, authorisation_id=auth.id)


async def settled_authorisation(
    ctx: Ctx, card: ManagedCard, settlement_id: int
) -> CardAuthorisation | None:
    """The card's authorisation that `settlement_id` settled, its row locked."""
    stmt = (
        select(CardAuthorisation)
        .where(
            CardAuthorisation.card_id == card.id,
            CardAuthorisation.programme_id == ctx.programme.id,
            CardAuthorisation.settlement_id == settlement_id,
        )
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    return (await ctx.db.execute(stmt)).scalar_one_or_none()


async def refund(
    ctx: Ctx,
    card: ManagedCard,
    attempt: Attempt,
    related: CardAuthorisation | None = None,
    related_settlement_id: int | None = None,
) -> Outcome:
    """The merchant gives money back: at most what the related settlement settled less its
    earlier refunds; without one it is a merchant credit with no cap. The refund fee is charged
    from it, never below a zero balance (D23)."""
    if attempt.amount <= 0:
        return Outcome(DENIED_AMOUNT_NOT_POSITIVE)
    if attempt.currency != card.currency or attempt.amount > MAX_AMOUNT:
        return Outcome(DENIED_OTHER)
    if related is not None and attempt.amount > related.settled_amount - related.refunded_amount:
        return Outcome(DENIED_NOT_ENOUGH_FUNDS, authorisation_id=related.id)
    account_id = spending_account(card)
    scheme = await scheme_account(ctx, account_id, card.currency)
    revenue = await revenue_account(ctx, account_id, card.currency)
    await _lock_accounts(ctx, [account_id, scheme, revenue])
    left = await available_of(ctx, account_id) + attempt.amount
    fee = max(0, min(card_fee(ctx.programme, REFUND, card.currency), left))
    merchant = dict(related.merchant) if related is not None else attempt.merchant()
    merchant["merchantTransactionType"] = PURCHASE_REFUND
    code = related.auth_code if related is not None else auth_code()
    refund_id = new_id()
    details = _details(card, merchant, code, attempt.amount, fee)
    if related is not None:
        details["authorisationId"] = str(related.id)
        details["settlementRelatedId"] = str(related_settlement_id)
    credit = attempt.amount - fee
    legs = [
        ledger.Leg(scheme, card.currency, -attempt.amount, -attempt.amount, guarded=False),
        ledger.Leg(account_id, card.currency, credit, credit),
    ]
    if fee:
        legs.append(ledger.Leg(revenue, card.currency, fee, fee, guarded=False))
    await ledger.post(
        ctx.db,
        programme_id=ctx.programme.id,
        type_=MERCHANT_REFUND,
        legs=legs,
        now_ms=ctx.now,
        details=details,
        transaction_id=refund_id,
    )
    if related is not None:
        related.refunded_amount += attempt.amount
        related.fee_amount += fee
    await _movement(ctx, card, refund_id, MERCHANT_REFUND)
    balance, to_spend = await _balances_for_event(ctx, card)
    await events.settlement(
        ctx,
        card,
        transaction_id=refund_id,
        settlement_type=PURCHASE_REFUND,
        amount=attempt.amount,
        fee=fee,
        merchant=merchant,
        auth_code=code,
        available_balance=balance,
        available_to_spend=to_spend,
        related_authorisation_id=None if related is None else related.id,
        related_settlement_id=related_settlement_id,
    )
    return Outcome(
        CODE_COMPLETED,
        authorisation_id=None if related is None else related.id,
        refund_id=refund_id,
    )


_AUTHORISATIONS = cast(Table, CardAuthorisation.__table__)
_MOVEMENTS = cast(Table, CardMovement.__table__)


async def purchase(
    ctx: Ctx,
    card: ManagedCard,
    attempt: Attempt,
    refused: Decline | None = None,
    profile_rules: dict[str, Any] | None = None,
) -> Outcome:
    """The simulator's purchase: an authorisation and its full settlement, in one database
    transaction (D23), recorded exactly as `authorise` then `settle` record them, in fewer
    statements: the spend windows are read once and the balances the events carry derived; the
    accounts are locked up front (in id order, in one statement), so the funds check reads the
    locked balance and no guard can refuse afterwards (no savepoint); the authorisation is
    written as settled, its ledger transaction as COMPLETED."""
    attempt, merchant, refused, _ = await _checked(
        ctx, card, attempt, refused, profile_rules, limits=False
    )
    if refused is not None:
        return await decline(ctx, card, attempt, refused)
    account_id, currency, amount = spending_account(card), card.currency, attempt.amount
    scheme = await scheme_account(ctx, account_id, currency)
    revenue = await revenue_account(ctx, account_id, currency)
    book, available, used = await _lock_purchase(ctx, card, account_id, scheme, revenue)
    refused = None if used is None else over_limit(card, used, amount)  # D22 #12
    if refused is None and available < amount:  # the guarded update's check (D22 #13)
        refused = NOT_ENOUGH_FUNDS
    if refused is not None:
        return await decline(ctx, card, attempt, refused)
    kind = ATM_WITHDRAWAL if merchant["merchantTransactionType"] == CASH_WITHDRAWAL else PURCHASE
    fee = max(0, min(card_fee(ctx.programme, kind, currency), available - amount))
    auth_id, settlement_id, code = new_id(), new_id(), auth_code()
    details = _details(card, merchant, code, -amount, 0)
    details["authorisationId"] = str(auth_id)
    details["forexPaddingCurrency"] = currency
    details["forexPaddingAmount"] = "0"
    # The guards below cannot refuse while the rows are locked: an InsufficientFunds here would
    # be a bug, and rolls the whole request back.
    authorisation = ledger.NewMovement(
        AUTHORISATION,
        [
            ledger.Leg(account_id, currency, -amount, 0),
            ledger.Leg(book, currency, amount, 0, guarded=False),
        ],
        auth_id,
        state=COMPLETED,  # settled below, in this transaction
        details=details,
    )
    settlement_details = _details(card, merchant, code, -amount, fee)
    settlement_details["authorisationId"] = str(auth_id)
    settlement_details["authorisationRelatedId"] = str(auth_id)
    legs = [
        ledger.Leg(book, currency, -amount, 0, guarded=False),
        ledger.Leg(account_id, currency, -fee, -(amount + fee)),
        ledger.Leg(scheme, currency, amount, amount, guarded=False),
    ]
    if fee:
        legs.append(ledger.Leg(revenue, currency, fee, fee, guarded=False))
    # Both movements, the authorisation's row (written settled) and both steps' card movements
    # in one statement on PostgreSQL (decision 0060): nothing in this request reads them back.
    authorisation_row = {
        "id": auth_id,
        "programme_id": ctx.programme.id,
        "card_id": card.id,
        "account_id": account_id,
        "reserved_account_id": book,
        "currency": currency,
        "held_amount": amount,
        "open_amount": 0,
        "settled_amount": amount,
        "fee_amount": fee,
        "refunded_amount": 0,
        "state": COMPLETED,
        "auth_code": code,
        "merchant": merchant,
        "settlement_id": settlement_id,
        "expires_at": ctx.now + AUTHORISATION_TTL_MS,
        "created_at": ctx.now,
    }
    movement_rows = [
        {
            "transaction_id": step_id,
            "programme_id": ctx.programme.id,
            "card_id": card.id,
            "account_id": account_id,
            "kind": step,
            "created_at": ctx.now,
        }
        for step_id, step in ((auth_id, AUTHORISATION), (settlement_id, SETTLEMENT))
    ]
    await ledger.post_all(
        ctx.db,
        programme_id=ctx.programme.id,
        movements=[
            authorisation,
            ledger.NewMovement(SETTLEMENT, legs, settlement_id, details=settlement_details),
        ],
        now_ms=ctx.now,
        rows=[(_AUTHORISATIONS, [authorisation_row]), (_MOVEMENTS, movement_rows)],
    )

    def after(spent_since: int) -> tuple[int | None, list[dict[str, Any]] | None]:
        # What `_balances_for_event` would read once `spent_since` has left the account.
        if used is not None:
            return None, to_spend_after(card, used, spent_since)
        return available - spent_since, None

    balance, to_spend = after(amount)
    await events.authorisation(
        ctx,
        card,
        transaction_id=auth_id,
        authorisation_type="AUTHORISED",
        amount=-amount,
        merchant=merchant,
        approved=True,
        decline_reason="NO_REASON",
        rule_failed="NONE",
        auth_code=code,
        available_balance=balance,
        available_to_spend=to_spend,
        related_authorisation_id=None,
    )
    balance, to_spend = after(amount + fee)
    await events.settlement(
        ctx,
        card,
        transaction_id=settlement_id,
        settlement_type=merchant["merchantTransactionType"],
        amount=-amount,
        fee=fee,
        merchant=merchant,
        auth_code=code,
        available_balance=balance,
        available_to_spend=to_spend,
        related_authorisation_id=auth_id,
        related_settlement_id=None,
    )
    return Outcome(APPROVED, authorisation_id=auth_id, settlement_id=settlement_id)


async def merchant_refund(
    ctx: Ctx, card: ManagedCard, attempt: Attempt, refused: Decline | None = None
) -> Outcome:
    """The reference's merchant refund: a purchase, then its refund in full (D26); the net
    effect is minus both fees."""
    bought = await purchase(ctx, card, attempt, refused)
    if bought.settlement_id is None or bought.authorisation_id is None:
        return bought
    auth = await locked_authorisation(ctx, card, bought.authorisation_id)
    refunded = await refund(ctx, card, attempt, auth, bought.settlement_id)
    return Outcome(
        APPROVED,
        authorisation_id=bought.authorisation_id,
        settlement_id=bought.settlement_id,
        refund_id=refunded.refund_id,
    )


# Expiry of open holds on the programme clock (D24), taken by `cards.money_steps`.


async def expire_due(ctx: Ctx, authorisation_id: int) -> bool:
    """Expires the authorisation if it is still open and due; False when another transaction
    holds it (skipped, not waited for) or it moved on."""
    stmt = (
        select(CardAuthorisation)
        .where(
            CardAuthorisation.id == authorisation_id,
            CardAuthorisation.state == PENDING_SETTLEMENT,
        )
        .with_for_update(skip_locked=True)
        .execution_options(populate_existing=True)
    )
    auth = (await ctx.db.execute(stmt)).scalar_one_or_none()
    if auth is None or auth.expires_at > ctx.now:
        return False
    card = await ctx.db.get(ManagedCard, auth.card_id)
    if card is None:
        return False
    await expire(ctx, card, auth)
    return True
