"""Bank details for IBAN-upgraded accounts: a GB IBAN with sort code and account number for GBP,
an IE IBAN (SEPA) for EUR and a SWIFT-reachable IE IBAN for USD. Check digits from python-stdnum;
account numbers from a counter row, so several processes never hand out the same one."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import String, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Mapped, mapped_column
from stdnum import iban as stdnum_iban

from multibank.kernel.db import Base

BANK_CODE = "MBNK"
BANK_NAME = "multibank sandbox bank"
BANK_ADDRESS = "1 Ledger Street, London, EC1A 1AA, United Kingdom"
# Per currency: IBAN country, sort code (GB) or branch code (IE), BIC, payment scheme.
SCHEMES: dict[str, tuple[str, str, str, str]] = {
    "GBP": ("GB", "040004", "MBNKGB2L", "FPS"),
    "EUR": ("IE", "931152", "MBNKIE2D", "SEPA"),
    "USD": ("IE", "931153", "MBNKIE2D", "SWIFT"),
}


class AccountNumberCounter(Base):
    __tablename__ = "account_number_counters"

    name: Mapped[str] = mapped_column(String(20), primary_key=True)
    next_value: Mapped[int]


@dataclass(frozen=True)
class Allocation:
    iban: str
    bic: str
    sort_code: str
    account_number: str


def supported(currency: str) -> bool:
    return currency in SCHEMES


async def _next_number(db: AsyncSession) -> int:
    stmt = (
        update(AccountNumberCounter)
        .where(AccountNumberCounter.name == "accounts")
        .values(next_value=AccountNumberCounter.next_value + 1)
        .returning(AccountNumberCounter.next_value)
    )
    value = (await db.execute(stmt)).scalar_one_or_none()
    if value is None:
        try:
            async with db.begin_nested():
                db.add(AccountNumberCounter(name="accounts", next_value=10_000_001))
                await db.flush()
            return 10_000_001
        except IntegrityError:
            value = (await db.execute(stmt)).scalar_one()
    return int(value)


def make_iban(country: str, branch: str, account_number: str) -> str:
    body = f"{BANK_CODE}{branch}{account_number}"
    check = stdnum_iban.calc_check_digits(f"{country}00{body}")
    return f"{country}{check}{body}"


async def allocate(db: AsyncSession, currency: str) -> Allocation:
    country, branch, bic, _ = SCHEMES[currency]
    number = f"{await _next_number(db):08d}"[-8:]
    return Allocation(make_iban(country, branch, number), bic, branch, number)


def details(
    currency: str, iban: str, bic: str, sort_code: str, account_number: str
) -> list[dict[str, str]]:
    """The `details` objects of `bankAccountDetails`, one per way to pay in."""
    scheme = SCHEMES[currency][3]
    if scheme == "FPS":
        return [
            {"accountNumber": account_number, "sortCode": sort_code},
            {"iban": iban, "code": bic},
        ]
    if scheme == "SEPA":
        return [{"iban": iban, "bankIdentifierCode": bic}]
    return [{"iban": iban, "code": bic}]
