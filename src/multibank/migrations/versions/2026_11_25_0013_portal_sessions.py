"""portal sessions: the web portal's signed-in operators (D17)

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-25 13:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "portal_sessions",
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("csrf", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.Column("ended_at", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("token_hash", name=op.f("pk_portal_sessions")),
    )


def downgrade() -> None:
    op.drop_table("portal_sessions")
