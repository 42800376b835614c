"""pending IBAN allocations: a partial index for the background step that finishes them

Every server process looks every second for allocations whose delay has passed (issue 32); the
index holds only the accounts whose allocation is pending, so the look reads those few rows
rather than every account.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-01 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PENDING = "iban_state = 'PENDING_ALLOCATION'"


def upgrade() -> None:
    op.create_index(
        "ix_managed_accounts_iban_pending",
        "managed_accounts",
        ["iban_requested_at"],
        sqlite_where=sa.text(PENDING),
        postgresql_where=sa.text(PENDING),
    )


def downgrade() -> None:
    op.drop_index("ix_managed_accounts_iban_pending", table_name="managed_accounts")
