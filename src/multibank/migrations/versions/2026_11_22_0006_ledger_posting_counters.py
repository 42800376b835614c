"""ledger posting counters

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-22 02:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("ledger_accounts", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("posting_count", sa.BigInteger(), server_default="0", nullable=False)
        )
        batch_op.add_column(
            sa.Column("movement_count", sa.BigInteger(), server_default="0", nullable=False)
        )
    # Accounts that already have postings start from their true counts.
    op.execute(
        """
        UPDATE ledger_accounts SET
          posting_count = (SELECT COUNT(*) FROM postings p WHERE p.account_id = ledger_accounts.id),
          movement_count = (SELECT COUNT(*) FROM postings p WHERE p.account_id = ledger_accounts.id
                            AND (p.available_amount <> 0 OR p.actual_amount <> 0))
        """
    )


def downgrade() -> None:
    with op.batch_alter_table("ledger_accounts", schema=None) as batch_op:
        batch_op.drop_column("movement_count")
        batch_op.drop_column("posting_count")
