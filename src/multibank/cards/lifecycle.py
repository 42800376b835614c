"""Card expiry and renewal on the programme clock (D24, D26, D27).

A card runs from its creation month for `expiryPeriodMonths`; `expires_at` is the first instant
(UTC, programme clock) after its expiry month. At the start of the expiry month a
`CARD_ABOUT_TO_EXPIRE` event is sent once (`expiry_notice_at` records it); once `expires_at`
has passed, a `NO_RENEW` card becomes `DESTROYED`/`EXPIRED` (state_change `DESTROYED` and
`CARD_EXPIRED`), and a renewing card is renewed: same number, expiry moved one period on, its
`version` raised so the CVV and its token change (`CARD_RENEWED`).

`lifecycle_due_at` is when the card's next step falls due (indexed): the clock's steps read only
the due cards, never every card. Whoever finds a card due takes its step, in a transaction of
its own holding the card's row (`SKIP LOCKED`: a row another transaction holds is left to it),
re-read under the lock, so each step happens once however many processes look: every server
process's worker and `clock/advance` once its new time is committed (both through the one
scheduler of due work, programmes/due.py: `DUE` below), and a read of the card (`refresh`),
which answers the card as the clock has it.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from sqlalchemy import select

from multibank.cards import events
from multibank.cards.models import ManagedCard
from multibank.kernel.clock import Clock
from multibank.kernel.db import Database
from multibank.kernel.errors import Conflict
from multibank.programmes.context import Ctx
from multibank.programmes.due import BATCH, NOW, DueWork, alone
from multibank.programmes.models import Programme

# A clock moved far ahead renews a card once per period it passed; a bound, so that a card whose
# data would never stop being due cannot hold a step forever (100 years of 1-month periods).
MAX_STEPS = 1200
DESTROYED = "DESTROYED"

# Months on the programme clock (UTC)


def month_start(ms: int, months_on: int = 0) -> int:
    """Epoch ms of the first instant of the month `months_on` after the month of `ms`."""
    at = datetime.fromtimestamp(ms / 1000, tz=UTC)
    index = at.year * 12 + at.month - 1 + months_on
    return int(datetime(index // 12, index % 12 + 1, 1, tzinfo=UTC).timestamp() * 1000)


def mmyy_at(ms: int) -> str:
    at = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return f"{at.month:02d}{at.year % 100:02d}"


def notice_at(card: ManagedCard) -> int:
    """The start of the expiry month: one month before the card expires."""
    return month_start(card.expires_at, -1)


def schedule(card: ManagedCard) -> None:
    """A new card's expiry from its creation time and period (its `expiry_mmyy` is the last
    month of validity), and its first step: the about-to-expire notice."""
    card.expires_at = month_start(card.created_at, card.expiry_period_months + 1)
    card.expiry_notice_at = None
    card.lifecycle_due_at = notice_at(card)


def is_due(ctx: Ctx, card: ManagedCard) -> bool:
    return card.lifecycle_due_at is not None and card.lifecycle_due_at <= ctx.now


def marked_lost_or_stolen(card: ManagedCard) -> bool:
    return card.blocked_reason == "LOST" or card.destroyed_reason in ("LOST", "STOLEN")


# The steps (the caller holds the card's row)


async def expire(ctx: Ctx, card: ManagedCard) -> None:
    """The card ends DESTROYED/EXPIRED; its spend rules go with it (D22). A prepaid card's money
    stays on its account."""
    card.state, card.blocked_reason, card.destroyed_reason = DESTROYED, None, "EXPIRED"
    card.spend_rules = None
    card.lifecycle_due_at = None
    await ctx.db.flush()
    if card.identity_id is not None:  # an unassigned pool card has nobody to tell
        await events.state_change(ctx, card, events.DESTROYED)
        await events.expiry(ctx, card, events.EXPIRED)


def next_expiry_month(card: ManagedCard) -> int:
    """A renewal's expiry month: the card's own one period on (D24: 36 months)."""
    return month_start(notice_at(card), card.expiry_period_months)


async def renew(ctx: Ctx, card: ManagedCard, issued: int) -> None:
    """Same number, reissued in the month of `issued`, its expiry moved one period on whenever
    the renewal comes (D24). The raised version changes the CVV (derived from number, expiry and
    version, D21) and its token."""
    expiry_month = next_expiry_month(card)
    card.version += 1
    card.start_mmyy = mmyy_at(month_start(issued))
    card.expiry_mmyy = mmyy_at(expiry_month)
    card.expires_at = month_start(expiry_month, 1)
    card.expiry_notice_at = None
    card.lifecycle_due_at = notice_at(card)
    await ctx.db.flush()
    if card.identity_id is not None:
        await events.expiry(ctx, card, events.RENEWED, renewal_timestamp=ctx.now)


async def notify(ctx: Ctx, card: ManagedCard) -> None:
    """CARD_ABOUT_TO_EXPIRE, recorded so the clock sends it once per expiry."""
    card.expiry_notice_at = ctx.now
    card.lifecycle_due_at = card.expires_at
    await ctx.db.flush()
    if card.identity_id is not None:
        await events.expiry(ctx, card, events.ABOUT_TO_EXPIRE)


async def step(ctx: Ctx, card: ManagedCard) -> bool:
    """Every step due by `ctx.now`, in order; True when one was taken. Past its expiry a card
    gets no late notice: the expiry (or renewal) says more."""
    taken = False
    for _ in range(MAX_STEPS):
        if not is_due(ctx, card):
            break
        taken = True
        if card.state == DESTROYED:
            card.lifecycle_due_at = None
            await ctx.db.flush()
            break
        if ctx.now >= card.expires_at:
            # A card reported lost is replaced by a new card, not renewed (decision 0048).
            if card.renewal_type == "NO_RENEW" or marked_lost_or_stolen(card):
                await expire(ctx, card)
            else:
                # Reissued in its expiry month: the expiry moves exactly one period on.
                await renew(ctx, card, notice_at(card))
        else:
            await notify(ctx, card)
    return taken


# The simulator's operations (D26, cards.md §6.2); the caller holds the card's row.


async def assigned_card(ctx: Ctx, card_id: int) -> ManagedCard | None:
    """A card of the programme that has an owner (not one waiting in the pool), locked."""
    stmt = (
        select(ManagedCard)
        .where(
            ManagedCard.programme_id == ctx.programme.id,
            ManagedCard.id == card_id,
            ManagedCard.identity_id.is_not(None),
        )
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    card = (await ctx.db.execute(stmt)).scalar_one_or_none()
    if card is not None and is_due(ctx, card):
        await step(ctx, card)  # what the clock already did comes first
    return card


async def simulate_expire(ctx: Ctx, card: ManagedCard) -> None:
    if card.state == DESTROYED:
        raise Conflict("INSTRUMENT_DESTROYED")
    if card.renewal_type != "NO_RENEW":
        raise Conflict("INSTRUMENT_NOT_EXPIRABLE")
    await expire(ctx, card)


async def simulate_about_to_expire(ctx: Ctx, card: ManagedCard) -> None:
    if card.state == DESTROYED:
        raise Conflict("INSTRUMENT_DESTROYED")
    card.expiry_notice_at = ctx.now
    card.lifecycle_due_at = card.expires_at
    await ctx.db.flush()
    await events.expiry(ctx, card, events.ABOUT_TO_EXPIRE)


async def simulate_renew(ctx: Ctx, card: ManagedCard) -> None:
    """Renewed now, as the clock would at expiry: reissued this month, its expiry one period
    (36 months) past the one it had."""
    if marked_lost_or_stolen(card):
        raise Conflict("INSTRUMENT_MARKED_LOST_STOLEN")
    if card.state == DESTROYED:
        raise Conflict("INSTRUMENT_DESTROYED")
    if card.renewal_type == "NO_RENEW":
        raise Conflict("INSTRUMENT_NOT_RENEWABLE")
    await renew(ctx, card, ctx.now)


# Who takes the steps: the scheduler of due work (programmes/due.py)

DUE = DueWork(
    "card lifecycle",
    ManagedCard,
    select(ManagedCard.id)
    .join(Programme, Programme.id == ManagedCard.programme_id)
    .where(
        ManagedCard.lifecycle_due_at.is_not(None),
        ManagedCard.lifecycle_due_at <= NOW + Programme.clock_offset_ms,
    )
    .order_by(ManagedCard.lifecycle_due_at)
    .limit(BATCH),
    step,
    still_due=ManagedCard.lifecycle_due_at.is_not(None),
)


async def refresh(db: Database, clock: Clock, ctx: Ctx, cards: Iterable[ManagedCard]) -> bool:
    """Before a read answers: each of `cards` that is due is stepped in a transaction of its
    own (the read's statements commit one at a time, and a step's change and its events must
    commit together). True when any was due: read the cards again."""
    due = [card.id for card in cards if is_due(ctx, card)]
    if not due:
        return False
    # The read gives its connection back to the pool before a step takes another: a read holding
    # one while it waits for a second would, with as many such reads at once as the pool has
    # connections, wait on itself until the pool's timeout (a 503). The read is autocommit, so
    # this undoes nothing; it also expires the read's loaded rows: its next query reloads them.
    await ctx.db.rollback()
    for card_id in due:
        await alone(db, clock, DUE, card_id)
    return True
