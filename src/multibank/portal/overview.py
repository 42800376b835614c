"""A programme's overview page (issue 35, decision 0054): counts, balances, the money that moved
per day and the payments waiting for the operator, each read with one aggregate query (GROUP BY
in the database, never rows summed in Python), the same on SQLite and PostgreSQL.

The charts are inline SVG drawn here from those sums: no script and no inline style, only
presentation attributes, which the portal's Content-Security-Policy (`default-src 'self'`)
allows. Every text put into the SVG goes through Markup escaping.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from markupsafe import Markup, escape
from sqlalchemy import case, func, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import InstrumentedAttribute

from multibank.accounts.models import ManagedAccount
from multibank.cards.models import ManagedCard
from multibank.identities.models import Identity
from multibank.kernel.money import minor_unit_exponent
from multibank.ledger.models import MANAGED_ACCOUNT, REVENUE, LedgerAccount, Posting
from multibank.payments.models import APPROVED, OWT, SUBMITTED, Payment

DAY_MS = 86_400_000
DAYS = 30
# The payments only the operator (or the bank behind a live programme) moves on: wire transfers
# submitted to the scheme. Payments waiting for their customer's SCA are not listed here.
WAITING = (SUBMITTED, APPROVED)
WAITING_SHOWN = 20


def amount(minor: int, currency: str) -> str:
    """Minor units as a reader writes money: `1,234,567.89 EUR` (thousands separated, the
    currency's own number of decimals, a minus sign in front)."""
    try:
        exp = minor_unit_exponent(currency)
    except (KeyError, ValueError):
        exp = 2
    sign = "-" if minor < 0 else ""
    whole, frac = divmod(abs(minor), 10**exp)
    number = f"{whole:,}" + (f".{frac:0{exp}d}" if exp else "")
    return f"{sign}{number} {currency}"


@dataclass
class Balance:
    currency: str
    available: int
    actual: int


@dataclass
class Day:
    day: int  # days since 1970-01-01 on the programme's clock
    money_in: int
    money_out: int


@dataclass
class Overview:
    customers: dict[str, int]
    accounts: dict[str, int]
    cards: dict[str, int]
    payments: dict[str, int]
    accounts_money: list[Balance]
    cards_money: list[Balance]
    revenue: list[Balance]
    first_day: int
    days: dict[str, list[Day]] = field(default_factory=dict)  # per currency, DAYS entries
    waiting: list[Payment] = field(default_factory=list)
    waiting_count: int = 0


async def _grouped(
    db: AsyncSession,
    column: InstrumentedAttribute[str],
    owner: InstrumentedAttribute[int],
    pid: int,
) -> dict[str, int]:
    """How many rows of one table per value of `column`, `owner` naming the programme."""
    stmt = select(column, func.count()).where(owner == pid).group_by(column).order_by(column)
    return {str(k): int(n) for k, n in (await db.execute(stmt)).all()}


async def _balances(
    db: AsyncSession, programme_id: int, instrument: InstrumentedAttribute[int] | None
) -> list[Balance]:
    """Balances summed per currency: of the ledger accounts behind `instrument` (managed
    accounts or cards, both with the ledger account's id), or the programme's revenue."""
    stmt = select(
        LedgerAccount.currency, func.sum(LedgerAccount.available), func.sum(LedgerAccount.actual)
    ).where(LedgerAccount.programme_id == programme_id)
    if instrument is None:
        stmt = stmt.where(LedgerAccount.kind == REVENUE)
    else:
        stmt = stmt.join(instrument.class_, instrument == LedgerAccount.id)
    stmt = stmt.group_by(LedgerAccount.currency).order_by(LedgerAccount.currency)
    return [Balance(c, int(a or 0), int(b or 0)) for c, a, b in (await db.execute(stmt)).all()]


async def read(db: AsyncSession, programme_id: int, now_ms: int) -> Overview:
    """The overview of one programme as of `now_ms` on its own clock."""
    pid = programme_id
    today = now_ms // DAY_MS
    first = today - DAYS + 1
    view = Overview(
        customers=await _grouped(db, Identity.type, Identity.programme_id, pid),
        accounts=await _grouped(db, ManagedAccount.state, ManagedAccount.programme_id, pid),
        cards=await _grouped(db, ManagedCard.mode, ManagedCard.programme_id, pid),
        payments=await _grouped(db, Payment.state, Payment.programme_id, pid),
        accounts_money=await _balances(db, programme_id, ManagedAccount.id),
        cards_money=await _balances(db, programme_id, ManagedCard.id),
        revenue=await _balances(db, programme_id, None),
        first_day=first,
    )
    # Settled money that moved on customers' accounts and prepaid cards (the MANAGED_ACCOUNT
    # ledger accounts): credits are money in, debits money out, per day and currency. A transfer
    # between two customers counts once on each side; holds (available-only) do not count.
    day = (Posting.created_at // DAY_MS).label("day")
    moved = (
        select(
            Posting.currency,
            day,
            func.sum(case((Posting.actual_amount > 0, Posting.actual_amount), else_=0)),
            func.sum(case((Posting.actual_amount < 0, -Posting.actual_amount), else_=0)),
        )
        .join(LedgerAccount, LedgerAccount.id == Posting.account_id)
        .where(
            Posting.programme_id == programme_id,
            LedgerAccount.kind == MANAGED_ACCOUNT,
            Posting.created_at >= first * DAY_MS,
            Posting.created_at < (today + 1) * DAY_MS,
        )
        .group_by(Posting.currency, day)
    )
    sums: dict[str, dict[int, tuple[int, int]]] = {}
    for currency, d, money_in, money_out in (await db.execute(moved)).all():
        sums.setdefault(currency, {})[int(d)] = (int(money_in or 0), int(money_out or 0))
    for currency in sorted(sums):
        per = sums[currency]
        view.days[currency] = [Day(first + i, *per.get(first + i, (0, 0))) for i in range(DAYS)]
    waiting = (
        Payment.programme_id == programme_id,
        Payment.kind == OWT,
        Payment.state.in_(WAITING),
    )
    view.waiting_count = int(
        (await db.execute(select(func.count()).select_from(Payment).where(*waiting))).scalar_one()
    )
    rows = await db.execute(
        select(Payment)
        .where(*waiting)
        .order_by(Payment.created_at, Payment.id)
        .limit(WAITING_SHOWN)
    )
    view.waiting = list(rows.scalars())
    return view


def day_name(day: int) -> str:
    """A day number (days since 1970-01-01) as its UTC date."""
    return datetime.fromtimestamp(day * 86_400, UTC).strftime("%Y-%m-%d")


WIDTH, HEIGHT, TOP, BOTTOM = 600, 180, 10, 24
COUNTS = 400  # the counts chart's width: narrower than the day chart, so its text stays legible
IN_COLOUR, OUT_COLOUR = "#2e7d32", "#c62828"


def day_chart(currency: str, days: list[Day]) -> Markup:
    """Money in and out per day as paired bars, scaled to the busiest day. Each bar carries a
    <title> with its date and amount; a day without money draws no bar."""
    peak = max([max(d.money_in, d.money_out) for d in days] + [1])
    slot = WIDTH / len(days)
    bar = slot * 0.4
    plot = HEIGHT - TOP - BOTTOM
    parts = [
        f'<svg class="chart" role="img" viewBox="0 0 {WIDTH} {HEIGHT}" width="100%" '
        f'data-currency="{escape(currency)}">',
        f"<title>Money in and out per day, {escape(currency)}</title>",
        f'<line x1="0" y1="{HEIGHT - BOTTOM}" x2="{WIDTH}" y2="{HEIGHT - BOTTOM}" stroke="#999"/>',
    ]
    for i, d in enumerate(days):
        x = i * slot + slot * 0.1
        for value, colour, kind, dx in (
            (d.money_in, IN_COLOUR, "in", 0.0),
            (d.money_out, OUT_COLOUR, "out", bar),
        ):
            if value <= 0:
                continue
            h = max(plot * value / peak, 1.0)
            label = f"{day_name(d.day)}: {kind} {amount(value, currency)}"
            parts.append(
                f'<rect class="bar {kind}" x="{x + dx:.1f}" y="{HEIGHT - BOTTOM - h:.1f}" '
                f'width="{bar:.1f}" height="{h:.1f}" fill="{colour}">'
                f"<title>{escape(label)}</title></rect>"
            )
    for i in (0, len(days) - 1):
        anchor = "start" if i == 0 else "end"
        x = 0 if i == 0 else WIDTH
        parts.append(
            f'<text x="{x}" y="{HEIGHT - 6}" font-size="12" text-anchor="{anchor}" '
            f'fill="#555">{day_name(days[i].day)}</text>'
        )
    parts.append("</svg>")
    return Markup("".join(parts))


def count_chart(counts: dict[str, int]) -> Markup:
    """Counts as horizontal bars (payments by state), labelled with the name and number."""
    if not counts:
        return Markup("")
    peak = max(counts.values()) or 1
    row = 22
    height = row * len(counts)
    parts = [
        f'<svg class="chart counts" role="img" viewBox="0 0 {COUNTS} {height}" width="100%">',
        "<title>Payments by state</title>",
    ]
    for i, (name, n) in enumerate(counts.items()):
        y = i * row
        w = max((COUNTS - 190) * n / peak, 1.0)
        label = f"{name.replace('_', ' ').lower()} {n:,}"
        parts.append(
            f'<text x="0" y="{y + 15}" font-size="13" fill="#333">{escape(label)}</text>'
            f'<rect class="bar" x="185" y="{y + 4}" width="{w:.1f}" height="14" '
            f'fill="#1565c0"><title>{escape(label)}</title></rect>'
        )
    parts.append("</svg>")
    return Markup("".join(parts))
