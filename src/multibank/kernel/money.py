"""Money as integer minor units of an ISO-4217 currency. Floats never touch it."""

from __future__ import annotations

from dataclasses import dataclass

# Active ISO-4217 codes and their minor-unit exponents (codes not listed have 2).
_EXPONENTS: dict[str, int] = {
    "BHD": 3,
    "BIF": 0,
    "CLP": 0,
    "DJF": 0,
    "GNF": 0,
    "IQD": 3,
    "ISK": 0,
    "JOD": 3,
    "JPY": 0,
    "KMF": 0,
    "KRW": 0,
    "KWD": 3,
    "LYD": 3,
    "OMR": 3,
    "PYG": 0,
    "RWF": 0,
    "TND": 3,
    "UGX": 0,
    "UYI": 0,
    "VND": 0,
    "VUV": 0,
    "XAF": 0,
    "XOF": 0,
    "XPF": 0,
}
ISO_4217: frozenset[str] = frozenset(
    [
        "AED",
        "AFN",
        "ALL",
        "AMD",
        "ANG",
        "AOA",
        "ARS",
        "AUD",
        "AWG",
        "AZN",
        "BAM",
        "BBD",
        "BDT",
        "BGN",
        "BHD",
        "BIF",
        "BMD",
        "BND",
        "BOB",
        "BRL",
        "BSD",
        "BTN",
        "BWP",
        "BYN",
        "BZD",
        "CAD",
        "CDF",
        "CHF",
        "CLP",
        "CNY",
        "COP",
        "CRC",
        "CUP",
        "CVE",
        "CZK",
        "DJF",
        "DKK",
        "DOP",
        "DZD",
        "EGP",
        "ERN",
        "ETB",
        "EUR",
        "FJD",
        "FKP",
        "GBP",
        "GEL",
        "GHS",
        "GIP",
        "GMD",
        "GNF",
        "GTQ",
        "GYD",
        "HKD",
        "HNL",
        "HTG",
        "HUF",
        "IDR",
        "ILS",
        "INR",
        "IQD",
        "IRR",
        "ISK",
        "JMD",
        "JOD",
        "JPY",
        "KES",
        "KGS",
        "KHR",
        "KMF",
        "KPW",
        "KRW",
        "KWD",
        "KYD",
        "KZT",
        "LAK",
        "LBP",
        "LKR",
        "LRD",
        "LSL",
        "LYD",
        "MAD",
        "MDL",
        "MGA",
        "MKD",
        "MMK",
        "MNT",
        "MOP",
        "MRU",
        "MUR",
        "MVR",
        "MWK",
        "MXN",
        "MYR",
        "MZN",
        "NAD",
        "NGN",
        "NIO",
        "NOK",
        "NPR",
        "NZD",
        "OMR",
        "PAB",
        "PEN",
        "PGK",
        "PHP",
        "PKR",
        "PLN",
        "PYG",
        "QAR",
        "RON",
        "RSD",
        "RUB",
        "RWF",
        "SAR",
        "SBD",
        "SCR",
        "SDG",
        "SEK",
        "SGD",
        "SHP",
        "SLE",
        "SOS",
        "SRD",
        "SSP",
        "STN",
        "SVC",
        "SYP",
        "SZL",
        "THB",
        "TJS",
        "TMT",
        "TND",
        "TOP",
        "TRY",
        "TTD",
        "TWD",
        "TZS",
        "UAH",
        "UGX",
        "USD",
        "UYU",
        "UZS",
        "VES",
        "VND",
        "VUV",
        "WST",
        "XAF",
        "XCD",
        "XOF",
        "XPF",
        "YER",
        "ZAR",
        "ZMW",
        "ZWL",
    ]
)


def is_currency(code: str) -> bool:
    return code in ISO_4217


def minor_unit_exponent(currency: str) -> int:
    return _EXPONENTS.get(currency, 2)


class CurrencyMismatch(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Money:
    amount: int
    currency: str

    def __post_init__(self) -> None:
        if isinstance(self.amount, bool) or not isinstance(self.amount, int):
            raise TypeError("Money amounts are integer minor units")
        if not is_currency(self.currency):
            raise ValueError(f"unknown ISO-4217 currency {self.currency!r}")
        if not -(2**63) <= self.amount < 2**63:
            raise OverflowError("amount does not fit in int64")

    def _same(self, other: Money) -> None:
        if other.currency != self.currency:
            raise CurrencyMismatch(f"{self.currency} and {other.currency}")

    def __add__(self, other: Money) -> Money:
        self._same(other)
        return Money(self.amount + other.amount, self.currency)

    def __sub__(self, other: Money) -> Money:
        self._same(other)
        return Money(self.amount - other.amount, self.currency)

    def __neg__(self) -> Money:
        return Money(-self.amount, self.currency)

    def is_zero(self) -> bool:
        return self.amount == 0

    def to_wire(self) -> dict[str, object]:
        return {"currency": self.currency, "amount": self.amount}

    def format(self) -> str:
        """Human form for statements and PDFs, e.g. `12.34 EUR`."""
        exp = minor_unit_exponent(self.currency)
        sign = "-" if self.amount < 0 else ""
        whole, frac = divmod(abs(self.amount), 10**exp)
        return (
            f"{sign}{whole}.{frac:0{exp}d} {self.currency}"
            if exp
            else f"{sign}{whole} {self.currency}"
        )


# The most one payment may carry on each scheme, in minor units: a SEPA credit transfer's
# 999,999,999.99 EUR, and the Faster Payments scheme's 1,000,000.00 GBP.
SEPA_LIMIT = 99_999_999_999
FASTER_PAYMENTS_LIMIT = 100_000_000
_PAYMENT_LIMITS = {"EUR": SEPA_LIMIT, "GBP": FASTER_PAYMENTS_LIMIT}


def payment_limit(currency: str) -> int:
    """The most one payment from outside may carry in `currency`, in minor units (D11b): the
    scheme limit of the currency's outgoing wire transfers, SEPA's for EUR and Faster
    Payments' for GBP; a currency no scheme here carries takes SEPA's figure in its own minor
    units. At most 2^63 / 10^11 ≈ 92 million such payments fit in a balance."""
    return _PAYMENT_LIMITS.get(currency, SEPA_LIMIT)
