"""payment settings: SCA of sends and wire transfers, the low-value exemption, wire transfer
processing (D13, D14); the return-fee rule of wire transfer profiles; push challenges of payments

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-25 11:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Quoted defaults ('1', '0') are read as booleans by PostgreSQL and as numbers by SQLite.
PROGRAMME_COLUMNS = (
    ("sends_sca_required", sa.Boolean(), "1"),
    ("owt_sca_required", sa.Boolean(), "1"),
    ("sca_challenge_limit", sa.Integer(), "5"),
    ("low_value_max_amount", sa.BigInteger(), "3000"),
    ("low_value_max_count", sa.Integer(), "5"),
    ("low_value_max_total", sa.BigInteger(), "10000"),
    ("owt_processing_delay_seconds", sa.Integer(), "2"),
)


def upgrade() -> None:
    with op.batch_alter_table("programmes", schema=None) as batch_op:
        for name, type_, default in PROGRAMME_COLUMNS:
            batch_op.add_column(sa.Column(name, type_, server_default=default, nullable=False))
    with op.batch_alter_table("profiles", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column(
                "return_fee_refunded",
                sa.Boolean(),
                server_default="0",
                nullable=False,
            )
        )
    with op.batch_alter_table("sca_challenges", schema=None) as batch_op:
        batch_op.add_column(sa.Column("payment_id", sa.BigInteger(), nullable=True))
        batch_op.create_index(batch_op.f("ix_sca_challenges_payment_id"), ["payment_id"])


def downgrade() -> None:
    with op.batch_alter_table("sca_challenges", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_sca_challenges_payment_id"))
        batch_op.drop_column("payment_id")
    with op.batch_alter_table("profiles", schema=None) as batch_op:
        batch_op.drop_column("return_fee_refunded")
    with op.batch_alter_table("programmes", schema=None) as batch_op:
        for name, _, _ in PROGRAMME_COLUMNS:
            batch_op.drop_column(name)
