"""redundant indexes: programme_id alone where a unique constraint starts with it

Every idempotent write and every ledger movement kept two indexes that answer nothing the
unique constraints on (programme_id, caller, operation, ref) and (programme_id, external_id)
do not, each a page written per commit on SQLite and an index insert on PostgreSQL
(decision 0021).

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-25 21:20:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.drop_index(op.f("ix_idempotency_records_programme_id"), table_name="idempotency_records")
    op.drop_index(op.f("ix_ledger_transactions_programme_id"), table_name="ledger_transactions")


def downgrade() -> None:
    op.create_index(
        op.f("ix_ledger_transactions_programme_id"), "ledger_transactions", ["programme_id"]
    )
    op.create_index(
        op.f("ix_idempotency_records_programme_id"), "idempotency_records", ["programme_id"]
    )
