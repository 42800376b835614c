"""Writing and reading the audit log (decision 0057).

`record` adds a row in the caller's transaction, so an action rolled back leaves no record.
`snapshot` is what an operator can set on a programme, flattened to one value per field
(settings, clock offset, profiles, fee types, card fees, API keys as id/prefix/label/state);
`diff` of two snapshots is the record's before and after. Secrets are never read here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, func, select, text
from sqlalchemy.ext.asyncio import AsyncSession

from multibank.accounts.models import ManagedAccount
from multibank.audit import chain
from multibank.audit.models import AuditRecord
from multibank.cards.models import ManagedCard
from multibank.kernel.db import Database, dialect_name
from multibank.kernel.ids import new_id
from multibank.kernel.validation import parse_id
from multibank.programmes import service as programmes
from multibank.programmes.models import Programme
from multibank.webhooks.models import WebhookEvent

CLI = "cli"
ADMIN_TOKEN = "admin token"
SIMULATOR = "simulator"
# Actions whose whole effect is on the programme's settings (the snapshot): one that changed
# nothing is not recorded, for nothing happened (issue 41 §5).
SETTINGS_ACTIONS = frozenset(
    {
        "programme.settings",
        "profile.update",
        "fee_type.set",
        "card_fee.set",
        "movement_fee.set",
        "clock.advance",
    }
)
Snapshot = dict[str, Any]
CHAIN_LOCK = 7_314_159_266  # the advisory lock that orders the chain's writers (PostgreSQL)


@dataclass(frozen=True)
class Target:
    kind: str
    id: str


async def record(
    db: AsyncSession,
    at_ms: int,
    actor: str,
    action: str,
    programme_id: int | None = None,
    target: Target | None = None,
    changes: dict[str, list[Any]] | None = None,
    note: str | None = None,
) -> AuditRecord:
    """Adds the record to `db`'s transaction, as the next link of the chain (audit/chain.py).

    The chain's end is read and extended while no other writer can: on PostgreSQL under a
    transaction-scoped advisory lock, held to the commit (a record is its action's last write,
    so the lock is held briefly); on SQLite by the one writer. `seq` is unique besides, so two
    records can never extend the same one."""
    if dialect_name(db) == "postgresql":
        await db.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": CHAIN_LOCK})
    last = (
        await db.execute(
            select(AuditRecord.seq, AuditRecord.hash).order_by(AuditRecord.seq.desc()).limit(1)
        )
    ).first()
    seq = 1 if last is None or last.seq is None else last.seq + 1
    prev = chain.GENESIS if last is None or last.hash is None else last.hash
    row = AuditRecord(
        id=new_id(),
        at=at_ms,
        actor=actor[:80],
        action=action[:60],
        programme_id=programme_id,
        target_kind=target.kind if target else None,
        target_id=target.id[:80] if target else None,
        changes=chain.normal_json(changes or None),
        note=note[:300] if note else None,
        seq=seq,
        prev_hash=prev,
    )
    row.hash = chain.digest_of(row, prev)
    db.add(row)
    await db.flush()
    return row


async def record_alone(database: Database, at_ms: int, actor: str, action: str, **kw: Any) -> None:
    """A record in a transaction of its own: for what is audited although it changed nothing
    (a refused sign-in) or did its work in transactions of its own (a CLI reset, a trigger)."""
    async with database.transaction() as db:
        await record(db, at_ms, actor, action, **kw)


async def snapshot(db: AsyncSession, programme_id: int | None) -> Snapshot:
    """What an operator can set on the programme, one value per field; {} for none."""
    programme = None if programme_id is None else await db.get(Programme, programme_id)
    if programme is None:
        return {}
    out: Snapshot = {f"settings.{k}": v for k, v in programmes.settings_of(programme)}
    out["clockOffsetSeconds"] = programme.clock_offset_ms // 1000
    for profile in await programmes.list_profiles(db, programme):
        for field, value in profile.model_dump(exclude_none=True).items():
            if field != "id":
                out[f"profiles.{profile.id}.{field}"] = value
    for fee in await programmes.list_fee_types(db, programme):
        out[f"feeTypes.{fee.name}"] = fee.amounts
    for kind, fees in (await programmes.card_fees_of(db, programme)).model_dump().items():
        out[f"cardFees.{kind}"] = fees
    for key in await programmes.list_api_keys(db, programme):
        state = "revoked" if key.revokedTimestamp else "active"
        out[f"apiKeys.{key.id}"] = f"{key.prefix}… {key.label or '(no label)'} ({state})"
    return out


async def subject(db: AsyncSession, programme_id: int | None, target: Target | None) -> Snapshot:
    """What an action on `target` can change of it, one value per field ({} for other kinds):
    an account's or a card's state and block reason, a delivery's state and attempts, the
    number of cards in the card pool."""
    if programme_id is None or target is None:
        return {}
    if target.kind == "card_pool":
        unassigned = select(func.count()).where(
            ManagedCard.programme_id == programme_id,
            ManagedCard.identity_id.is_(None),
            ManagedCard.state != "DESTROYED",
        )
        return {"cardPool.unassigned": int(await db.scalar(unassigned) or 0)}
    number = parse_id(target.id)
    if number is None:
        return {}
    if target.kind in ("account", "card"):
        model = ManagedAccount if target.kind == "account" else ManagedCard
        stmt = select(model.state, model.blocked_reason).where(
            model.programme_id == programme_id, model.id == number
        )
        row = (await db.execute(stmt)).first()
        if row is None:
            return {}
        return {
            f"{target.kind}.state": row.state,
            f"{target.kind}.blockedReason": row.blocked_reason,
        }
    if target.kind == "webhook_event":
        found = select(WebhookEvent.state, WebhookEvent.attempts).where(
            WebhookEvent.programme_id == programme_id, WebhookEvent.id == number
        )
        event = (await db.execute(found)).first()
        if event is None:
            return {}
        return {"delivery.state": event.state, "delivery.attempts": event.attempts}
    return {}


def changed_nothing(action: str, changes: dict[str, list[Any]]) -> bool:
    """A settings action that left every setting as it was: not recorded as a change."""
    return action in SETTINGS_ACTIONS and not changes


def diff(before: Snapshot, after: Snapshot) -> dict[str, list[Any]]:
    """{field: [before, after]} of each field that changed (None where it was not or is no
    more)."""
    return {
        field: [before.get(field), after.get(field)]
        for field in sorted(before.keys() | after.keys())
        if before.get(field) != after.get(field)
    }


def wire(row: AuditRecord) -> dict[str, Any]:
    """A record as the operator API and the portal show it."""
    return {
        "id": str(row.id),
        "timestamp": row.at,
        "actor": row.actor,
        "action": row.action,
        "programmeId": None if row.programme_id is None else str(row.programme_id),
        "target": None
        if row.target_kind is None
        else {"kind": row.target_kind, "id": row.target_id},
        "changes": [
            {"field": field, "before": pair[0], "after": pair[1]}
            for field, pair in sorted((row.changes or {}).items())
        ],
        "note": row.note,
        "seq": row.seq,
        "hash": row.hash,
    }


def _query(programme_id: int | None, action: str | None, actor: str | None) -> Select[Any]:
    stmt = select(AuditRecord)
    if programme_id is not None:
        stmt = stmt.where(AuditRecord.programme_id == programme_id)
    if action:
        # An action ("api_key.revoke") or what it acts on ("api_key").
        kind = AuditRecord.action.startswith(f"{action}.", autoescape=True)
        stmt = stmt.where((AuditRecord.action == action) | kind)
    if actor:
        stmt = stmt.where(AuditRecord.actor == actor)
    return stmt


async def page(
    db: AsyncSession,
    programme_id: int | None,
    action: str | None,
    actor: str | None,
    offset: int,
    limit: int,
) -> tuple[int, list[AuditRecord]]:
    """The records asked for, newest first, and how many there are in all."""
    stmt = _query(programme_id, action, actor)
    count = int((await db.execute(select(func.count()).select_from(stmt.subquery()))).scalar_one())
    rows = await db.scalars(
        stmt.order_by(AuditRecord.at.desc(), AuditRecord.id.desc()).offset(offset).limit(limit)
    )
    return count, list(rows)


async def choices(db: AsyncSession, programme_id: int | None) -> tuple[list[str], list[str]]:
    """The actions and the actors there are records of, for the filters' lists."""
    lists = []
    for column in (AuditRecord.action, AuditRecord.actor):
        stmt = select(column).distinct().order_by(column)
        if programme_id is not None:
            stmt = stmt.where(AuditRecord.programme_id == programme_id)
        lists.append([str(v) for v in await db.scalars(stmt.limit(200))])
    return lists[0], lists[1]


async def record_change(
    db: AsyncSession,
    at_ms: int,
    actor: str,
    action: str,
    programme_id: int,
    before: Snapshot,
    target: Target | None = None,
    note: str | None = None,
) -> None:
    """Records an action done in `db`'s transaction, with the settings it changed since
    `before` (a `snapshot` taken before it; {} for a programme it made)."""
    changes = diff(before, await snapshot(db, programme_id))
    if changed_nothing(action, changes):
        return
    await record(db, at_ms, actor, action, programme_id, target, changes, note)


async def record_cli(
    database: Database,
    at_ms: int,
    action: str,
    programme_name: str | None = None,
    event_id: int | None = None,
    target: Target | None = None,
    note: str | None = None,
) -> None:
    """A CLI command's record, in a transaction of its own once the command's work is done
    (its own transactions: a reset, a trigger, a replay); the programme named by its name or
    by the webhook event it acted on."""
    async with database.transaction() as db:
        programme_id = None
        if programme_name is not None:
            programme_id = await db.scalar(
                select(Programme.id).where(Programme.name == programme_name)
            )
        if event_id is not None:
            programme_id = await db.scalar(
                select(WebhookEvent.programme_id).where(WebhookEvent.id == event_id)
            )
        await record(db, at_ms, CLI, action, programme_id, target, note=note)
