"""The audit log's hash chain (decision 0076): each record carries the hash of the one before it
(`prev_hash`) and its own (`hash`, over its fields and `prev_hash`), in the order of `seq`
(1, 2, 3 ... with no gap). Changing, removing or inserting a record breaks the chain at it;
`verify` names the first break. Migration 0028 chained the records written before it with a
frozen copy of `digest`: the format below must never change."""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from multibank.audit.models import AuditRecord

GENESIS = "0" * 64
BATCH = 1000


def normal_json(value: Any) -> Any:
    """`value` as it reads back from a JSON column (object keys as strings, tuples as lists)."""
    return None if value is None else json.loads(json.dumps(value))


# Over 8 parameters: the record's fields, each hashed in this order (its stored form).
def digest(
    seq: int,
    record_id: int,
    at: int,
    actor: str,
    action: str,
    programme_id: int | None,
    target_kind: str | None,
    target_id: str | None,
    changes: Any,
    note: str | None,
    prev_hash: str,
) -> str:
    """SHA-256 (hex) of the record's fields in canonical JSON."""
    fields = [
        seq,
        record_id,
        at,
        actor,
        action,
        programme_id,
        target_kind,
        target_id,
        changes,
        note,
        prev_hash,
    ]
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def digest_of(row: AuditRecord, prev_hash: str) -> str:
    return digest(
        row.seq or 0,
        row.id,
        row.at,
        row.actor,
        row.action,
        row.programme_id,
        row.target_kind,
        row.target_id,
        normal_json(row.changes),
        row.note,
        prev_hash,
    )


@dataclass(frozen=True)
class Verdict:
    """What `verify` found: how many records it read, the chain's head (seq, hash), and the
    first break (None when the chain is whole)."""

    records: int
    head_seq: int
    head_hash: str
    broken_at: AuditRecord | None = None
    reason: str | None = None


async def _in_order(db: AsyncSession) -> AsyncIterator[AuditRecord]:
    after = 0
    while True:
        stmt = (
            select(AuditRecord)
            .where(AuditRecord.seq > after)
            .order_by(AuditRecord.seq)
            .limit(BATCH)
        )
        rows = list(await db.scalars(stmt))
        for row in rows:
            yield row
        if len(rows) < BATCH:
            return
        after = rows[-1].seq or after


async def verify(db: AsyncSession) -> Verdict:
    """Walks the chain from its first record; stops at the first break."""
    count, expected_seq, prev = 0, 1, GENESIS
    async for row in _in_order(db):
        count += 1
        if row.seq != expected_seq:
            why = f"record seq {expected_seq} is missing (removed?): the next is seq {row.seq}"
            return Verdict(count, expected_seq - 1, prev, row, why)
        if row.prev_hash != prev:
            why = "its prev_hash is not the hash of the record before it"
            return Verdict(count, expected_seq - 1, prev, row, why)
        if row.hash != digest_of(row, prev):
            why = "its content does not match its hash (changed after it was written?)"
            return Verdict(count, expected_seq - 1, prev, row, why)
        prev, expected_seq = row.hash, expected_seq + 1
    unchained = await db.scalar(
        select(AuditRecord)
        .where(AuditRecord.seq.is_(None) | (AuditRecord.seq < 1))
        .order_by(AuditRecord.id)
        .limit(1)
    )
    if unchained is not None:
        total = int(await db.scalar(select(func.count()).select_from(AuditRecord)) or 0)
        why = "it has no place in the chain (inserted outside the server?)"
        return Verdict(total, expected_seq - 1, prev, unchained, why)
    return Verdict(count, expected_seq - 1, prev)
