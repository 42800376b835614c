"""A physical card's manufacturing on the programme clock (D25): `REQUESTED` at the upgrade (or a
replacement), `SENT_FOR_FULFILLMENT` one hour later, `DISPATCHED` 24 hours after the request,
`DELIVERED` once activated. Each step is a `physical_cards_upgrade` event.

A card whose next step is due has `manufacturing_due_at` set (programme-clock ms). Whoever finds it
due takes the step: a read or write of the card (`advance`, called by `service.load`), every server
process's worker and `clock/advance` once the new time is committed, through the one scheduler of
due work (programmes/due.py, `DUE` below), as payment steps and IBAN allocations are. A step
is one guarded UPDATE (the state and due time it moves from), so however many look, each step
happens once and sends its event once. On a read (autocommit) the event follows the step rather than
sharing its transaction, as an IBAN allocation's does."""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import select, update

from multibank.cards import events
from multibank.cards.models import ManagedCard
from multibank.kernel.db import changed
from multibank.programmes.context import Ctx
from multibank.programmes.due import BATCH, NOW, DueWork
from multibank.programmes.models import Programme

log = logging.getLogger("multibank.cards")
REQUESTED, SENT, DISPATCHED, DELIVERED = (
    "REQUESTED",
    "SENT_FOR_FULFILLMENT",
    "DISPATCHED",
    "DELIVERED",
)
HOUR_MS = 3_600_000
# Each state's next one and when it falls due, counted from the manufacturing request.
_NEXT = {REQUESTED: (SENT, HOUR_MS), SENT: (DISPATCHED, 24 * HOUR_MS)}


def due_at(state: str, requested_at: int) -> int | None:
    step = _NEXT.get(state)
    return None if step is None else requested_at + step[1]


def details(card: ManagedCard) -> dict[str, Any] | None:
    """`physicalCardDetails` (cards.md §2.6), or None for a card never upgraded."""
    if card.manufacturing_state is None:
        return None
    replacement: dict[str, str] = {"replacementId": str(card.replacement_id or 0)}
    if card.replacement_reason:
        replacement["replacementReason"] = card.replacement_reason
    out: dict[str, Any] = {
        "productReference": card.product_reference,
        "carrierType": card.carrier_type,
        "pendingActivation": card.pending_activation,
        "pinBlocked": card.pin_blocked,
        "manufacturingState": card.manufacturing_state,
        "replacement": replacement,
        "deliveryMethod": card.delivery_method,
    }
    if card.delivery_address is not None:
        out["deliveryAddress"] = card.delivery_address
    return out


async def request(ctx: Ctx, card: ManagedCard) -> None:
    """A new manufacturing run (upgrade, damaged or lost/stolen replacement): REQUESTED now,
    waiting for activation. The caller flushed the card or holds its row."""
    card.manufacturing_state = REQUESTED
    card.manufacturing_requested_at = ctx.now
    card.manufacturing_due_at = due_at(REQUESTED, ctx.now)
    card.pending_activation = True
    await ctx.db.flush()
    await upgrade_event(ctx, card)


async def delivered(ctx: Ctx, card: ManagedCard) -> None:
    """Activation: the card reached its holder (the caller holds its row)."""
    card.manufacturing_state = DELIVERED
    card.manufacturing_due_at = None
    card.pending_activation = False
    await ctx.db.flush()
    await upgrade_event(ctx, card)


async def upgrade_event(ctx: Ctx, card: ManagedCard) -> None:
    body = details(card)
    assert body is not None  # only upgraded cards are manufactured
    await events.physical_upgrade(ctx, card, body)


def is_due(ctx: Ctx, card: ManagedCard) -> bool:
    return (
        card.manufacturing_due_at is not None
        and card.manufacturing_due_at <= ctx.now
        and card.state != "DESTROYED"
    )


async def advance(ctx: Ctx, card: ManagedCard) -> bool:
    """Every step of `card` due by `ctx`'s clock, each once with its event; True when one was
    taken here. The card is refreshed from what the database holds."""
    taken = False
    for _ in range(len(_NEXT) + 2):  # each try takes a step, or sees another take it
        if not is_due(ctx, card):
            break
        state, due = card.manufacturing_state, card.manufacturing_due_at
        assert state is not None and due is not None and card.manufacturing_requested_at
        following = _NEXT.get(state)
        if following is None:
            break
        new_state = following[0]
        stmt = (
            update(ManagedCard)
            .where(
                ManagedCard.id == card.id,
                ManagedCard.manufacturing_state == state,
                ManagedCard.manufacturing_due_at == due,
            )
            .values(
                manufacturing_state=new_state,
                manufacturing_due_at=due_at(new_state, card.manufacturing_requested_at),
            )
            .execution_options(synchronize_session=False)
        )
        done = changed(await ctx.db.execute(stmt)) == 1
        await ctx.db.refresh(card)
        if not done:
            continue  # someone else took it: read what it became
        taken = True
        await upgrade_event(ctx, card)
        await ctx.db.flush()
    return taken


DUE = DueWork(
    "card manufacturing",
    ManagedCard,
    select(ManagedCard.id)
    .join(Programme, Programme.id == ManagedCard.programme_id)
    .where(
        ManagedCard.manufacturing_due_at.is_not(None),
        ManagedCard.manufacturing_due_at <= NOW + Programme.clock_offset_ms,
        ManagedCard.state != "DESTROYED",
    )
    .order_by(ManagedCard.manufacturing_due_at)
    .limit(BATCH),
    advance,
)
