"""The operator's side of cards (D24, D32): card profiles and their settings, every card of a
programme with its number masked, SYSTEM block and unblock, and each card's authorisations.
Flushes, never commits. Nothing here reads the encrypted number: the operator sees the first six
and last four digits only (D20)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from multibank.cards import events
from multibank.cards.models import CardMovement, ManagedCard
from multibank.cards.service import (
    ACTIVE,
    BLOCKED,
    CARD_BRAND,
    CARD_PROFILES,
    DEFAULT_RENEWAL,
    DESTROYED,
    EXPIRY_PERIOD_MONTHS,
    SANDBOX_BIN,
)
from multibank.kernel.errors import Conflict, NotFound
from multibank.ledger.models import LedgerAccount, LedgerTransaction
from multibank.programmes import repository as programmes
from multibank.programmes.context import Ctx
from multibank.programmes.models import Programme

SYSTEM, USER = "SYSTEM", "USER"
AUTHORISATION = "AUTHORISATION"
# An open authorisation's hold lasts this long on the programme clock (D19, D24).
AUTHORISATION_EXPIRY_DAYS = 7
MAX_PAGE = 100
_MODE_AND_TYPE = {kind: key for key, kind in CARD_PROFILES.items()}


def masked(card: ManagedCard) -> str:
    """The only form of the number the operator sees (D20)."""
    return f"{card.number_first_six}******{card.number_last_four}"


async def card_profiles(db: AsyncSession, programme: Programme) -> list[dict[str, Any]]:
    """The programme's card profiles with what each fixes for its cards (D19)."""
    out = []
    for p in await programmes.list_profiles(db, programme.id):
        if p.kind not in _MODE_AND_TYPE:
            continue
        identity_type, mode = _MODE_AND_TYPE[p.kind]
        out.append(
            {
                "id": str(p.id),
                "kind": p.kind,
                "identityType": identity_type,
                "mode": mode,
                "currencies": list(p.currencies),
                "active": p.active,
                "cardBrand": CARD_BRAND,
                "bin": SANDBOX_BIN,
                "expiryPeriodMonths": EXPIRY_PERIOD_MONTHS,
                "renewalType": DEFAULT_RENEWAL,
                "authorisationExpiryDays": AUTHORISATION_EXPIRY_DAYS,
                # Profile-level spend rules (D22), set through the profile PATCH; {} when none.
                "spendRules": dict(p.spend_rules or {}),
            }
        )
    return out


def card_view(card: ManagedCard, balance: LedgerAccount | None) -> dict[str, Any]:
    """A card as the operator sees it: the money it spends (a prepaid card's own, a debit
    card's parent account's) and no more of the number than its first six and last four."""
    body: dict[str, Any] = {
        "id": str(card.id),
        # None while the card waits unassigned in the programme's card pool (D31).
        "identity": None
        if card.identity_id is None
        else {"type": card.identity_type, "id": str(card.identity_id)},
        "profileId": str(card.profile_id),
        "mode": card.mode,
        "type": card.type,
        "cardBrand": card.card_brand,
        "currency": card.currency,
        "friendlyName": card.friendly_name,
        "maskedCardNumber": masked(card),
        "cardNumberFirstSix": card.number_first_six,
        "cardNumberLastFour": card.number_last_four,
        "nameOnCard": card.name_on_card,
        "state": events.state_of(card),
        "startMmyy": card.start_mmyy,
        "expiryMmyy": card.expiry_mmyy,
        "renewalType": events.renewal_wire(card),
        "creationTimestamp": card.created_at,
    }
    if card.parent_account_id is not None:
        body["parentManagedAccountId"] = str(card.parent_account_id)
    if card.pool_reference is not None:
        body["poolReference"] = card.pool_reference
    if card.manufacturing_state is not None:
        body["manufacturingState"] = card.manufacturing_state
    if balance is not None:
        body["balances"] = {"availableBalance": balance.available, "actualBalance": balance.actual}
    return body


def _with_balance() -> Any:
    # Prepaid: the card's own ledger account (its id); debit: the parent account's.
    return select(ManagedCard, LedgerAccount).outerjoin(
        LedgerAccount,
        LedgerAccount.id == func.coalesce(ManagedCard.parent_account_id, ManagedCard.id),
    )


async def page(
    db: AsyncSession,
    programme_id: int,
    identity_id: int | None,
    states: Sequence[str],
    offset: int,
    limit: int,
) -> tuple[int, list[tuple[ManagedCard, LedgerAccount | None]]]:
    """The programme's cards (one identity's when given), newest first."""
    conditions: list[Any] = [ManagedCard.programme_id == programme_id]
    if identity_id is not None:
        conditions.append(ManagedCard.identity_id == identity_id)
    if states:
        conditions.append(ManagedCard.state.in_(list(states)))
    total = (
        await db.execute(select(func.count()).select_from(ManagedCard).where(*conditions))
    ).scalar_one()
    rows = (
        await db.execute(
            _with_balance()
            .where(*conditions)
            .order_by(ManagedCard.created_at.desc(), ManagedCard.id.desc())
            .offset(offset)
            .limit(min(limit, MAX_PAGE))
        )
    ).all()
    return int(total), [(r[0], r[1]) for r in rows]


async def get(
    db: AsyncSession, programme_id: int, card_id: int, for_update: bool = False
) -> tuple[ManagedCard, LedgerAccount | None]:
    """A card of this programme; another programme's is as unknown as a missing one (404)."""
    stmt = _with_balance().where(
        ManagedCard.programme_id == programme_id, ManagedCard.id == card_id
    )
    if for_update:
        stmt = stmt.with_for_update(of=ManagedCard)
    row = (await db.execute(stmt.execution_options(populate_existing=True))).one_or_none()
    if row is None:
        raise NotFound("Managed card not found")
    return row[0], row[1]


def _marked_lost_or_stolen(card: ManagedCard) -> bool:
    # `reported`: a card reported lost or stolen, whatever its block reason (cards/physical.py).
    return (
        card.reported is not None
        or card.blocked_reason == "LOST"
        or card.destroyed_reason in ("LOST", "STOLEN")
    )


async def system_block(ctx: Ctx, card: ManagedCard) -> None:
    """Blocks a card with reason SYSTEM, which its users cannot lift (D24). A card the user had
    blocked takes the SYSTEM reason (the stronger block; decision 0049): the user can then no
    longer unblock it, and the operator's unblock makes it ACTIVE."""
    if _marked_lost_or_stolen(card):
        raise Conflict("INSTRUMENT_MARKED_LOST_STOLEN")
    if card.state == DESTROYED:
        raise Conflict("INSTRUMENT_DESTROYED")
    if card.state == BLOCKED and card.blocked_reason == SYSTEM:
        raise Conflict("INSTRUMENT_ALREADY_BLOCKED")
    card.state, card.blocked_reason = BLOCKED, SYSTEM
    await ctx.db.flush()
    await events.state_change(ctx, card, events.BLOCKED)


async def system_unblock(ctx: Ctx, card: ManagedCard) -> None:
    """Lifts a SYSTEM block. A USER block stays the user's to lift (INSTRUMENT_NOT_BLOCKED: the
    card is not blocked by the operator), and a lost card's block is lifted by no unblock."""
    if _marked_lost_or_stolen(card):
        raise Conflict("INSTRUMENT_MARKED_LOST_STOLEN")
    if card.state == DESTROYED:
        raise Conflict("INSTRUMENT_DESTROYED")
    if card.state != BLOCKED or card.blocked_reason != SYSTEM:
        raise Conflict("INSTRUMENT_NOT_BLOCKED")
    card.state, card.blocked_reason = ACTIVE, None
    await ctx.db.flush()
    await events.state_change(ctx, card, events.UNBLOCKED)


async def authorisations(
    db: AsyncSession, programme_id: int, card_id: int, offset: int = 0, limit: int = MAX_PAGE
) -> tuple[int, list[dict[str, Any]]]:
    """The card's authorisations, newest first, each with its state (PENDING while its hold is
    open; COMPLETED, REVERSED or EXPIRED once closed) and the later steps that name it
    (settlement, reversal, expiry, refund), read from the card's ledger transactions."""
    base = (
        select(LedgerTransaction)
        .join(CardMovement, CardMovement.transaction_id == LedgerTransaction.id)
        .where(CardMovement.programme_id == programme_id, CardMovement.card_id == card_id)
    )
    auths_q = base.where(LedgerTransaction.type == AUTHORISATION)
    total = (await db.execute(select(func.count()).select_from(auths_q.subquery()))).scalar_one()
    auths = (
        (
            await db.execute(
                auths_q.order_by(LedgerTransaction.created_at.desc(), LedgerTransaction.id.desc())
                .offset(offset)
                .limit(min(limit, MAX_PAGE))
            )
        )
        .scalars()
        .all()
    )
    steps: dict[str, list[dict[str, Any]]] = {str(a.id): [] for a in auths}
    if auths:
        later = (
            (
                await db.execute(
                    base.where(LedgerTransaction.type != AUTHORISATION).order_by(
                        LedgerTransaction.created_at, LedgerTransaction.id
                    )
                )
            )
            .scalars()
            .all()
        )
        for t in later:
            of = str((t.details or {}).get("authorisationId", ""))
            if of in steps:
                steps[of].append(
                    {"id": str(t.id), "type": t.type, "state": t.state, "timestamp": t.created_at}
                )
    return int(total), [_authorisation(a, steps[str(a.id)]) for a in auths]


_DETAIL_KEYS = (
    "merchantName",
    "merchantCategoryCode",
    "merchantId",
    "merchantTerminalCountry",
    "merchantTransactionType",
    "authorisationCode",
    "transactionAmount",
)


def _authorisation(t: LedgerTransaction, steps: list[dict[str, Any]]) -> dict[str, Any]:
    details = t.details or {}
    body: dict[str, Any] = {"id": str(t.id), "state": t.state, "timestamp": t.created_at}
    body.update({k: details[k] for k in _DETAIL_KEYS if k in details})
    body["steps"] = steps
    return body
