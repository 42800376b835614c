"""One row per operator action (issue 35 §4, decision 0057): who, what, when, and where it changed
settings the fields it changed, before and after. Never a secret's value: API keys appear as
their id, prefix and label, a new webhook secret only as the action that made it.

Append-only: no code updates or deletes a row, and the database refuses both (migration 0025:
a statement trigger on PostgreSQL, row triggers on SQLite), as for the ledger's postings; the
server's own PostgreSQL role has no UPDATE, DELETE or TRUNCATE on it (decision 0075).
Tamper-evident: each record carries the hash of the one before it (`audit/chain.py`, decision
0076)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, BigInteger, Index, String
from sqlalchemy.orm import Mapped, mapped_column

from multibank.kernel.db import ID, Base


class AuditRecord(Base):
    __tablename__ = "audit_records"
    __table_args__ = (
        Index("ix_audit_records_at", "at", "id"),
        Index("ix_audit_records_programme", "programme_id", "at", "id"),
        Index("ix_audit_records_seq", "seq", unique=True),
    )

    id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=False)
    at: Mapped[int]  # wall clock (server time, UTC), milliseconds: never a programme's clock
    # "portal session 1a2b3c4d", "portal" (a refused sign-in), "admin token", "cli"
    actor: Mapped[str] = mapped_column(String(80))
    action: Mapped[str] = mapped_column(String(60))  # "api_key.revoke"
    # No foreign key: a record outlives what it names (a reset programme's old id).
    programme_id: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    target_kind: Mapped[str | None] = mapped_column(String(30), nullable=True)  # "api_key"
    target_id: Mapped[str | None] = mapped_column(String(80), nullable=True)
    # {field: [before, after]} of the settings the action changed; None when it changed none.
    changes: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    note: Mapped[str | None] = mapped_column(String(300), nullable=True)
    # The record's place in the chain (1, 2, ...; unique, so two writers cannot both extend the
    # same record), the hash of the record before it and its own (audit/chain.py). NULL only
    # in a row written outside the server, which `multibank audit verify` reports.
    seq: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    prev_hash: Mapped[str | None] = mapped_column(String(64), nullable=True)
    hash: Mapped[str | None] = mapped_column(String(64), nullable=True)
