"""operator audit log: one row per operator action, append-only (issue 35 §4, decision 0057)

`audit_records`: when (wall clock, UTC ms), who (portal session, admin token, cli), what (action
and target), the settings it changed (before and after) and a note. The database refuses
UPDATE, DELETE (and on PostgreSQL TRUNCATE) on it, as on `postings` (migration 0017): a
statement-level trigger raising an exception on PostgreSQL, row triggers with `RAISE(ABORT)`
on SQLite.

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-07 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
REFUSED = "audit records are append-only"

PG_FUNCTION = f"""
CREATE FUNCTION audit_records_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '{REFUSED}: % refused', TG_OP USING ERRCODE = 'restrict_violation';
END
$$
"""
PG_TRIGGER = """
CREATE TRIGGER audit_records_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON audit_records
FOR EACH STATEMENT EXECUTE FUNCTION audit_records_append_only()
"""


def upgrade() -> None:
    op.create_table(
        "audit_records",
        sa.Column("id", ID, autoincrement=False, nullable=False),
        sa.Column("at", sa.BigInteger(), nullable=False),
        sa.Column("actor", sa.String(length=80), nullable=False),
        sa.Column("action", sa.String(length=60), nullable=False),
        sa.Column("programme_id", sa.BigInteger(), nullable=True),
        sa.Column("target_kind", sa.String(length=30), nullable=True),
        sa.Column("target_id", sa.String(length=80), nullable=True),
        sa.Column("changes", sa.JSON(), nullable=True),
        sa.Column("note", sa.String(length=300), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_records")),
    )
    op.create_index("ix_audit_records_at", "audit_records", ["at", "id"])
    op.create_index("ix_audit_records_programme", "audit_records", ["programme_id", "at", "id"])
    if op.get_bind().dialect.name == "postgresql":
        op.execute(PG_FUNCTION)
        op.execute(PG_TRIGGER)
    else:
        for verb in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER audit_records_no_{verb.lower()} BEFORE {verb} ON audit_records"
                f" BEGIN SELECT RAISE(ABORT, '{REFUSED}: {verb} refused'); END"
            )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER audit_records_append_only ON audit_records")
        op.execute("DROP FUNCTION audit_records_append_only()")
    # (SQLite drops a table's triggers with it.)
    op.drop_index("ix_audit_records_programme", table_name="audit_records")
    op.drop_index("ix_audit_records_at", table_name="audit_records")
    op.drop_table("audit_records")
