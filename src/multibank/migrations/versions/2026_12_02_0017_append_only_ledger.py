"""append-only ledger: postings are never updated nor deleted (decision 0043)

A hold was settled or released by rewriting its posting. Now a hold is a pending posting, and
settling or releasing it writes a new posting on the same account that names it
(`pending_id`), as TigerBeetle's two-phase transfers post or void a pending transfer. Each
posting records its place in the account's chain (`seq`, the account's `posting_count` after
it), so `ledger verify` can check every balance after against the one before it.
`ledger_accounts.closing_count` counts the closing postings, folded into their hold's statement
entry.

The database refuses UPDATE, DELETE (and on PostgreSQL TRUNCATE) on `postings`: a statement-level
trigger raising an exception on PostgreSQL, row triggers with `RAISE(ABORT)` on SQLite.

Postings written before this revision keep `seq` NULL: their holds may have been rewritten, so
their chain is not checked; the chain of an account starts at its first posting written after.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-02 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
ENTRY = "pending_id IS NULL"
CLOSING = "pending_id IS NOT NULL"
REFUSED = "postings are append-only"

PG_FUNCTION = f"""
CREATE FUNCTION postings_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '{REFUSED}: % refused', TG_OP USING ERRCODE = 'restrict_violation';
END
$$
"""
PG_TRIGGER = """
CREATE TRIGGER postings_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON postings
FOR EACH STATEMENT EXECUTE FUNCTION postings_append_only()
"""


def upgrade() -> None:
    op.add_column("postings", sa.Column("seq", sa.BigInteger(), nullable=True))
    op.add_column("postings", sa.Column("pending_id", ID, nullable=True))
    op.add_column(
        "ledger_accounts",
        sa.Column("closing_count", sa.BigInteger(), server_default="0", nullable=False),
    )
    op.drop_index("ix_postings_account_time", table_name="postings")
    op.create_index(
        "ix_postings_entries",
        "postings",
        ["account_id", "created_at", "id"],
        sqlite_where=sa.text(ENTRY),
        postgresql_where=sa.text(ENTRY),
    )
    op.create_index("ix_postings_account_seq", "postings", ["account_id", "seq"], unique=True)
    op.create_index(
        "ix_postings_pending_id",
        "postings",
        ["pending_id"],
        unique=True,
        sqlite_where=sa.text(CLOSING),
        postgresql_where=sa.text(CLOSING),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(PG_FUNCTION)
        op.execute(PG_TRIGGER)
    else:
        for verb in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER postings_no_{verb.lower()} BEFORE {verb} ON postings"
                f" BEGIN SELECT RAISE(ABORT, '{REFUSED}: {verb} refused'); END"
            )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER postings_append_only ON postings")
        op.execute("DROP FUNCTION postings_append_only()")
    else:
        op.execute("DROP TRIGGER postings_no_update")
        op.execute("DROP TRIGGER postings_no_delete")
    op.drop_index("ix_postings_pending_id", table_name="postings")
    op.drop_index("ix_postings_account_seq", table_name="postings")
    op.drop_index("ix_postings_entries", table_name="postings")
    op.create_index("ix_postings_account_time", "postings", ["account_id", "created_at", "id"])
    op.drop_column("ledger_accounts", "closing_count")
    op.drop_column("postings", "pending_id")
    op.drop_column("postings", "seq")
