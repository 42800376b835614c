"""guesses and the audit chain: wrong admin tokens counted in the database, pool cards locked
after wrong activation codes, audit records chained by hash (issue 41 §5, decisions 0074, 0076)

- `wrong_guesses`: one row per wrong admin token (scope, client address, wall-clock ms), which
  every process of a deployment reads and writes (kernel/guesses.py).
- `managed_cards.activation_failures`: wrong activation codes given for a pool card at assign.
- `audit_records.seq`, `prev_hash`, `hash`: each record's place in the chain, the hash of the
  record before it and its own (audit/chain.py). The records written before this revision are
  chained here, oldest first, with a frozen copy of the hash's format; the append-only trigger
  is lifted for that, inside this migration's transaction, and put back.
- `ledger_transactions.details` and `webhook_events.payload` are written once: a trigger refuses
  an UPDATE that changes them (PostgreSQL: a row trigger raising `restrict_violation`; SQLite:
  `RAISE(ABORT)`), whoever runs it; the server's own role has no UPDATE on them either
  (decision 0075).

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-07 18:00:00
"""

import hashlib
import json
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0028"
down_revision: str | None = "0027"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
GENESIS = "0" * 64
SQLITE_REFUSED = "audit records are append-only"


def _digest(fields: list[object]) -> str:
    # Frozen copy of multibank.audit.chain.digest: the format never changes.
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _chain_existing() -> None:
    bind = op.get_bind()
    postgresql = bind.dialect.name == "postgresql"
    records = sa.table(
        "audit_records",
        sa.column("id", ID),
        sa.column("at", sa.BigInteger()),
        sa.column("actor", sa.String()),
        sa.column("action", sa.String()),
        sa.column("programme_id", sa.BigInteger()),
        sa.column("target_kind", sa.String()),
        sa.column("target_id", sa.String()),
        sa.column("changes", sa.JSON()),
        sa.column("note", sa.String()),
        sa.column("seq", sa.BigInteger()),
        sa.column("prev_hash", sa.String()),
        sa.column("hash", sa.String()),
    )
    rows = bind.execute(sa.select(records).order_by(records.c.at, records.c.id)).all()
    if not rows:
        return
    if postgresql:
        op.execute("ALTER TABLE audit_records DISABLE TRIGGER audit_records_append_only")
    else:
        op.execute("DROP TRIGGER audit_records_no_update")
    prev = GENESIS
    for seq, row in enumerate(rows, start=1):
        changes = None if row.changes is None else json.loads(json.dumps(row.changes))
        fields: list[object] = [
            seq,
            row.id,
            row.at,
            row.actor,
            row.action,
            row.programme_id,
            row.target_kind,
            row.target_id,
            changes,
            row.note,
            prev,
        ]
        own = _digest(fields)
        bind.execute(
            records.update().where(records.c.id == row.id).values(seq=seq, prev_hash=prev, hash=own)
        )
        prev = own
    if postgresql:
        op.execute("ALTER TABLE audit_records ENABLE TRIGGER audit_records_append_only")
    else:
        op.execute(
            "CREATE TRIGGER audit_records_no_update BEFORE UPDATE ON audit_records"
            f" BEGIN SELECT RAISE(ABORT, '{SQLITE_REFUSED}: UPDATE refused'); END"
        )


WRITTEN_ONCE = (("ledger_transactions", "details"), ("webhook_events", "payload"))
PG_WRITTEN_ONCE = """
CREATE FUNCTION written_once() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '%.% is written once: UPDATE refused', TG_TABLE_NAME, TG_ARGV[0]
        USING ERRCODE = 'restrict_violation';
END
$$
"""


def _written_once() -> None:
    postgresql = op.get_bind().dialect.name == "postgresql"
    if postgresql:
        op.execute(PG_WRITTEN_ONCE)
    for table, column in WRITTEN_ONCE:
        name = f"{table}_{column}_written_once"
        if postgresql:
            op.execute(
                f"CREATE TRIGGER {name} BEFORE UPDATE OF {column} ON {table} FOR EACH ROW"
                f" WHEN (OLD.{column}::text IS DISTINCT FROM NEW.{column}::text)"
                f" EXECUTE FUNCTION written_once('{column}')"
            )
        else:
            op.execute(
                f"CREATE TRIGGER {name} BEFORE UPDATE OF {column} ON {table}"
                f" WHEN OLD.{column} IS NOT NEW.{column}"
                f" BEGIN SELECT RAISE(ABORT, '{table}.{column} is written once: UPDATE refused');"
                " END"
            )


def upgrade() -> None:
    op.create_table(
        "wrong_guesses",
        sa.Column("id", ID, autoincrement=False, nullable=False),
        sa.Column("scope", sa.String(length=30), nullable=False),
        sa.Column("key", sa.String(length=100), nullable=False),
        sa.Column("at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_wrong_guesses")),
    )
    op.create_index("ix_wrong_guesses_key", "wrong_guesses", ["scope", "key", "at"])
    op.create_index("ix_wrong_guesses_at", "wrong_guesses", ["at"])
    op.add_column(
        "managed_cards",
        sa.Column("activation_failures", sa.Integer(), server_default="0", nullable=False),
    )
    op.add_column("audit_records", sa.Column("seq", sa.BigInteger(), nullable=True))
    op.add_column("audit_records", sa.Column("prev_hash", sa.String(length=64), nullable=True))
    op.add_column("audit_records", sa.Column("hash", sa.String(length=64), nullable=True))
    _chain_existing()
    op.create_index("ix_audit_records_seq", "audit_records", ["seq"], unique=True)
    _written_once()


def downgrade() -> None:
    postgresql = op.get_bind().dialect.name == "postgresql"
    for table, column in WRITTEN_ONCE:
        on = f" ON {table}" if postgresql else ""
        op.execute(f"DROP TRIGGER {table}_{column}_written_once{on}")
    if postgresql:
        op.execute("DROP FUNCTION written_once()")
    op.drop_index("ix_audit_records_seq", table_name="audit_records")
    op.drop_column("audit_records", "hash")
    op.drop_column("audit_records", "prev_hash")
    op.drop_column("audit_records", "seq")
    op.drop_column("managed_cards", "activation_failures")
    op.drop_index("ix_wrong_guesses_at", table_name="wrong_guesses")
    op.drop_index("ix_wrong_guesses_key", table_name="wrong_guesses")
    op.drop_table("wrong_guesses")
