"""A programme's overview page (issue 35, decision 0054): counts, balances, the money that moved
per day and the payments waiting for the operator, each read with one aggregate query (GROUP BY
in the database, never rows summed in Python), the same on SQLite and PostgreSQL.

The charts are inline SVG drawn here from those sums: no script and no inline style, only
presentation attributes, which the portal's Content-Security-Policy (`default-src 'self'`)
allows. Every text put into the SVG goes through Markup escaping.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial

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
from multibank.portal import card_payments

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


async def _payments_by_state(db: AsyncSession, programme_id: int) -> dict[str, int]:
    """Payments and card steps (authorisations, settlements, refunds) per state: the rows the
    payments page lists (`card_payments.listing`), counted in the database."""
    listed = card_payments.listing(programme_id)
    stmt = select(listed.c.state, func.count()).group_by(listed.c.state).order_by(listed.c.state)
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
        payments=await _payments_by_state(db, pid),
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


WIDTH, PLOT = 600, 160  # the bars' own coordinates; the SVG stretches them to its box
IN_COLOUR, OUT_COLOUR = "#2e7d32", "#c62828"
GRID = "#d8dde3"


def nice_ceiling(value: int) -> int:
    """The smallest 1, 2 or 5 times a power of ten that is at least `value` (> 0): the top of a
    value axis whose halves are round numbers too."""
    step = 1
    while True:
        for m in (1, 2, 5):
            if m * step >= value:
                return m * step
        step *= 10


def _number(minor: int, currency: str) -> str:
    """An axis label: the amount without its currency (the chart's caption names it)."""
    return amount(minor, currency).removesuffix(f" {currency}")


def _ticks(peak: int, write: Callable[[int], str]) -> list[str]:
    """An axis's values from 0 up: 0, the half (empty when it is not a whole number of the
    axis's units) and `peak`, as `write` writes them (escaped)."""
    half = write(peak // 2) if peak % 2 == 0 else ""
    return [str(escape(write(0))), str(escape(half)), str(escape(write(peak)))]


def _value_line() -> str:
    # Filled by portal.js with the value of the bar under the pointer or with the focus; the
    # bars' <title> is the same text for a browser without scripts (a tooltip on hover).
    return (
        '<p class="chart-value muted" aria-live="polite">'
        "Point at a bar, or tab to it, to read its value.</p>"
    )


def day_chart(currency: str, days: list[Day]) -> Markup:
    """Money in and out per day as paired bars under a value axis, scaled to a round number at
    or above the busiest day. The text (axis values, dates, the period) is HTML around the SVG,
    so it keeps the stylesheet's size at every width: the SVG holds only the bars and grid lines,
    stretched to its box. Each bar can take the focus and carries its date and amount (<title>
    and `data-value`); a day without money draws no bar."""
    peak = nice_ceiling(max([max(d.money_in, d.money_out) for d in days] + [1]))
    slot = WIDTH / len(days)
    bar = slot * 0.4
    period = f"{day_name(days[0].day)} to {day_name(days[-1].day)}"
    title = f"Money in and out per day, {currency}, {period} (UTC)"
    parts = [
        f'<figure class="chart-figure" data-chart="{escape(currency)}">',
        f"<figcaption>{escape(currency)} per day, {period} (UTC)</figcaption>",
        '<div class="plot"><div class="y-axis" aria-hidden="true">',
        *(f"<span>{t}</span>" for t in reversed(_ticks(peak, partial(_number, currency=currency)))),
        "</div>",
        f'<svg class="chart" role="img" viewBox="0 0 {WIDTH} {PLOT}" preserveAspectRatio="none" '
        f'aria-label="{escape(title)}" data-currency="{escape(currency)}">',
        f"<title>{escape(title)}</title>",
    ]
    for y in (0.5, PLOT / 2, PLOT - 0.5):
        parts.append(
            f'<line x1="0" y1="{y}" x2="{WIDTH}" y2="{y}" stroke="{GRID}" '
            'vector-effect="non-scaling-stroke"/>'
        )
    for i, d in enumerate(days):
        x = i * slot + slot * 0.1
        for value, colour, kind, dx in (
            (d.money_in, IN_COLOUR, "in", 0.0),
            (d.money_out, OUT_COLOUR, "out", bar),
        ):
            if value <= 0:
                continue
            h = max(PLOT * value / peak, 1.0)
            label = f"{day_name(d.day)}: {kind} {amount(value, currency)}"
            parts.append(
                f'<rect class="bar {kind}" x="{x + dx:.1f}" y="{PLOT - h:.1f}" '
                f'width="{bar:.1f}" height="{h:.1f}" fill="{colour}" tabindex="0" '
                f'data-value="{escape(label)}"><title>{escape(label)}</title></rect>'
            )
    middle = days[len(days) // 2].day
    parts += [
        "</svg><span></span>",
        '<div class="x-axis" aria-hidden="true">',
        *(f"<span>{day_name(d)}</span>" for d in (days[0].day, middle, days[-1].day)),
        "</div></div>",
        _value_line(),
        "</figure>",
    ]
    return Markup("".join(parts))


def count_chart(counts: dict[str, int], period: str = "") -> Markup:
    """Counts as horizontal bars (payments by state), one row each: its name and number in
    HTML (the stylesheet's size at every width), its bar in an SVG stretched to the row, the
    bar scaled to a round number at or above the largest count."""
    if not counts:
        return Markup("")
    peak = nice_ceiling(max(counts.values()) or 1)
    parts = ['<figure class="chart-figure counts-figure">']
    if period:
        parts.append(f"<figcaption>Payments by state, {escape(period)}</figcaption>")
    parts.append('<div class="count-rows">')
    for name, n in counts.items():
        words = name.replace("_", " ").lower()
        label = f"{words}: {n:,}"
        width = max(100 * n / peak, 0.5)
        parts.append(
            f'<div class="count-row"><span class="count-label">{escape(words)}</span>'
            '<svg class="chart counts" viewBox="0 0 100 10" preserveAspectRatio="none">'
            f'<rect class="bar" x="0" y="0" width="{width:.1f}" height="10" fill="#1565c0" '
            f'tabindex="0" data-value="{escape(label)}"><title>{escape(label)}</title></rect>'
            f'</svg><span class="count-value">{n:,}</span></div>'
        )
    ticks = "".join(f"<span>{t}</span>" for t in _ticks(peak, lambda v: f"{v:,}"))
    parts += [
        '<div class="count-row count-axis" aria-hidden="true"><span></span>'
        f'<span class="ticks">{ticks}</span><span></span></div></div>',
        _value_line(),
        "</figure>",
    ]
    return Markup("".join(parts))
