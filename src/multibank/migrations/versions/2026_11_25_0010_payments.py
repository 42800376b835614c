"""payments: transfers, sends and outgoing wire transfers (D12)

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25 10:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "payments",
        sa.Column("id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("programme_id", sa.BigInteger(), nullable=False),
        sa.Column("kind", sa.String(length=30), nullable=False),
        sa.Column("identity_id", sa.BigInteger(), nullable=False),
        sa.Column("identity_type", sa.String(length=10), nullable=False),
        sa.Column("user_id", sa.BigInteger(), nullable=False),
        sa.Column("profile_id", sa.BigInteger(), nullable=False),
        sa.Column("tag", sa.String(length=50), nullable=True),
        sa.Column("source_type", sa.String(length=20), nullable=False),
        sa.Column("source_id", sa.BigInteger(), nullable=False),
        sa.Column("destination_type", sa.String(length=20), nullable=True),
        sa.Column("destination_id", sa.BigInteger(), nullable=True),
        sa.Column("destination_identity_id", sa.BigInteger(), nullable=True),
        sa.Column("beneficiary", sa.JSON(), nullable=True),
        sa.Column("scheme", sa.String(length=20), nullable=True),
        sa.Column("description", sa.String(length=255), nullable=True),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("amount", sa.BigInteger(), nullable=False),
        sa.Column("fee", sa.BigInteger(), nullable=False),
        sa.Column("state", sa.String(length=25), nullable=False),
        sa.Column("rejected_info", sa.String(length=10), nullable=True),
        sa.Column("failure", sa.String(length=50), nullable=True),
        sa.Column("exemption", sa.String(length=20), nullable=True),
        sa.Column("transaction_id", sa.BigInteger(), nullable=True),
        sa.Column("reserved", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("challenge_channel", sa.String(length=10), nullable=True),
        sa.Column("challenge_user_id", sa.BigInteger(), nullable=True),
        sa.Column("challenge_started_at", sa.BigInteger(), nullable=True),
        sa.Column("challenge_failures", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("sca_at", sa.BigInteger(), nullable=True),
        sa.Column("due_at", sa.BigInteger(), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["identity_id"], ["identities.id"], name=op.f("fk_payments_identity_id_identities")
        ),
        sa.ForeignKeyConstraint(
            ["profile_id"], ["profiles.id"], name=op.f("fk_payments_profile_id_profiles")
        ),
        sa.ForeignKeyConstraint(
            ["programme_id"], ["programmes.id"], name=op.f("fk_payments_programme_id_programmes")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_payments")),
    )
    op.create_index(
        "ix_payments_owner",
        "payments",
        ["programme_id", "identity_id", "kind", "created_at", "id"],
    )
    op.create_index("ix_payments_due", "payments", ["due_at"])


def downgrade() -> None:
    op.drop_index("ix_payments_due", table_name="payments")
    op.drop_index("ix_payments_owner", table_name="payments")
    op.drop_table("payments")
