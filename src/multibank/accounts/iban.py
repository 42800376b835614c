"""Bank details for IBAN-upgraded accounts: a GB IBAN with sort code and account number for GBP,
an IE IBAN (SEPA) for EUR and a SWIFT-reachable IE IBAN for USD. Check digits from python-stdnum;
account numbers from a counter row, so several processes never hand out the same one."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import String, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
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


FIRST_NUMBER = 10_000_001


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
    """The next account number, in one guarded statement. The counter row is created on first
    use with INSERT … ON CONFLICT DO NOTHING, not a savepoint: the first allocation may come
    from a read, whose statements run in autocommit, where PostgreSQL has no savepoints."""
    stmt = (
        update(AccountNumberCounter)
        .where(AccountNumberCounter.name == "accounts")
        .values(next_value=AccountNumberCounter.next_value + 1)
        .returning(AccountNumberCounter.next_value)
    )
    value = (await db.execute(stmt)).scalar_one_or_none()
    if value is None:
        insert = pg_insert if db.get_bind().dialect.name == "postgresql" else sqlite_insert
        await db.execute(
            insert(AccountNumberCounter)
            .values(name="accounts", next_value=FIRST_NUMBER - 1)
            .on_conflict_do_nothing(index_elements=["name"])
        )
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
