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
Flushes, never commits.

The package, each module on the ones before it: `terms` (modes, ledger kinds and types, the
simulator's codes, an attempt, a refusal, a step's answer), `checks` (D22's checks in order, the
spend windows), `books` (the ledger accounts of card money, their locks, what a step writes
beside its movement), `steps` (authorise, settle, reverse, expire, refund) and `purchases` (the
simulator's purchase: authorise then settle in one transaction, in fewer statements, decision
0060). Callers take the names below from the package; `books`' locks and rows, and `checks`'
statement of the spend, are the steps' own."""

from __future__ import annotations

from multibank.cards.money.books import (
    available_of,
    reserved_book,
    revenue_account,
    scheme_account,
    spending_account,
)
from multibank.cards.money.checks import (
    INTERVALS,
    available_to_spend,
    check_pin,
    expired,
    limits_of,
    over_limit,
    past_expiry,
    profile_spend_rules,
    spend_rule_decline,
    spent,
    standing_decline,
    to_spend_after,
    window_start,
)
from multibank.cards.money.purchases import (
    merchant_refund,
    purchase,
)
from multibank.cards.money.steps import (
    authorise,
    decline,
    expire,
    expire_due,
    locked_authorisation,
    refund,
    reverse,
    settle,
    settled_authorisation,
)
from multibank.cards.money.terms import (
    APPROVED,
    ATM_MCC,
    AUTHORISATION,
    AUTHORISATION_EXPIRY,
    AUTHORISATION_REVERSAL,
    AUTHORISATION_TTL_MS,
    CARD_RESERVED,
    CARD_SCHEME,
    CASH_WITHDRAWAL,
    CODE_COMPLETED,
    CVV_FAILED,
    DEBIT,
    DEFAULT_COUNTRY,
    DEFAULT_MCC,
    DEFAULT_MERCHANT_NAME,
    DENIED_AMOUNT_NOT_POSITIVE,
    DENIED_AUTHORISATION_NOT_FOUND,
    DENIED_AUTHORISATION_NOT_PENDING,
    DENIED_CARD_EXPIRY,
    DENIED_CARD_INACTIVE,
    DENIED_CARD_NOT_FOUND,
    DENIED_INCORRECT_CVV,
    DENIED_NOT_ENOUGH_FUNDS,
    DENIED_OTHER,
    DENIED_SPEND_CONTROL,
    EXPIRY_FAILED,
    INACTIVE,
    MAX_AMOUNT,
    MERCHANT_REFUND,
    NOT_ENOUGH_FUNDS,
    NOT_PERMITTED,
    NOT_PERMITTED_AMOUNT,
    PHYSICAL_NOT_ACTIVATED,
    PIN_BLOCKED,
    PIN_FAILED,
    PIN_TRIES,
    PREPAID,
    PURCHASE_REFUND,
    SALE_PURCHASE,
    SETTLEMENT,
    Attempt,
    Decline,
    Outcome,
    alpha2,
    auth_code,
    spend_control,
)

__all__ = [
    "APPROVED",
    "ATM_MCC",
    "AUTHORISATION",
    "AUTHORISATION_EXPIRY",
    "AUTHORISATION_REVERSAL",
    "AUTHORISATION_TTL_MS",
    "CARD_RESERVED",
    "CARD_SCHEME",
    "CASH_WITHDRAWAL",
    "CODE_COMPLETED",
    "CVV_FAILED",
    "DEBIT",
    "DEFAULT_COUNTRY",
    "DEFAULT_MCC",
    "DEFAULT_MERCHANT_NAME",
    "DENIED_AMOUNT_NOT_POSITIVE",
    "DENIED_AUTHORISATION_NOT_FOUND",
    "DENIED_AUTHORISATION_NOT_PENDING",
    "DENIED_CARD_EXPIRY",
    "DENIED_CARD_INACTIVE",
    "DENIED_CARD_NOT_FOUND",
    "DENIED_INCORRECT_CVV",
    "DENIED_NOT_ENOUGH_FUNDS",
    "DENIED_OTHER",
    "DENIED_SPEND_CONTROL",
    "EXPIRY_FAILED",
    "INACTIVE",
    "INTERVALS",
    "MAX_AMOUNT",
    "MERCHANT_REFUND",
    "NOT_ENOUGH_FUNDS",
    "NOT_PERMITTED",
    "NOT_PERMITTED_AMOUNT",
    "PHYSICAL_NOT_ACTIVATED",
    "PIN_BLOCKED",
    "PIN_FAILED",
    "PIN_TRIES",
    "PREPAID",
    "PURCHASE_REFUND",
    "SALE_PURCHASE",
    "SETTLEMENT",
    "Attempt",
    "Decline",
    "Outcome",
    "alpha2",
    "auth_code",
    "authorise",
    "available_of",
    "available_to_spend",
    "check_pin",
    "decline",
    "expire",
    "expire_due",
    "expired",
    "limits_of",
    "locked_authorisation",
    "merchant_refund",
    "over_limit",
    "past_expiry",
    "profile_spend_rules",
    "purchase",
    "refund",
    "reserved_book",
    "revenue_account",
    "reverse",
    "scheme_account",
    "settle",
    "settled_authorisation",
    "spend_control",
    "spend_rule_decline",
    "spending_account",
    "spent",
    "standing_decline",
    "to_spend_after",
    "window_start",
]
