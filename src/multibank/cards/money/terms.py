"""The words of card money (D22, D23, D26): the card modes, the ledger account kinds and
transaction types of card steps, the simulator's answer codes, what a merchant asks (`Attempt`),
a refusal (`Decline`, with D22's reasons) and a step's answer (`Outcome`). No database here."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

import pycountry

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


def auth_code() -> str:
    return f"{secrets.randbelow(1_000_000):06d}"
