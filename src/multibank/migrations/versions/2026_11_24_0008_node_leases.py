"""node leases: each process's id node, leased from the database

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24 23:35:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

NODES = 1024  # the 10 node bits of an id (kernel/ids.py)


def upgrade() -> None:
    table = op.create_table(
        "node_leases",
        sa.Column("node_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("holder", sa.String(length=200), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("node_id", name=op.f("pk_node_leases")),
    )
    op.create_index(op.f("ix_node_leases_expires_at"), "node_leases", ["expires_at"])
    op.bulk_insert(table, [{"node_id": n, "holder": "", "expires_at": 0} for n in range(NODES)])


def downgrade() -> None:
    op.drop_index(op.f("ix_node_leases_expires_at"), table_name="node_leases")
    op.drop_table("node_leases")
