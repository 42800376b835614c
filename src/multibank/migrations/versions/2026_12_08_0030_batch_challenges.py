"""batch challenges: one SCA challenge over several sends or wire transfers (issue 43 §2, D37,
decision 0086)

- `batch_challenges`: the challenge (who started it, in which session, on which channel, over
  which kind of resource), its state, its wrong answers and its time, and the linked accounts
  whose declaration it confirms (payments name their batch themselves).
- `payments.batch_challenge_id`: the batch challenge a payment was put in.

Revision ID: 0030
Revises: 0029
Create Date: 2026-12-08 01:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0030"
down_revision: str | None = "0029"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "batch_challenges",
        sa.Column("id", ID, autoincrement=False, nullable=False),
        sa.Column("programme_id", ID, nullable=False),
        sa.Column("identity_id", sa.BigInteger(), nullable=False),
        sa.Column("user_id", sa.BigInteger(), nullable=False),
        sa.Column("session_id", sa.BigInteger(), nullable=False),
        sa.Column("resource_type", sa.String(40), nullable=False),
        sa.Column("channel", sa.String(10), nullable=False),
        sa.Column("status", sa.String(10), nullable=False),
        sa.Column("failures", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.Column("settled_at", sa.BigInteger(), nullable=True),
        sa.Column("resource_ids", sa.JSON(), nullable=True),
        sa.ForeignKeyConstraint(
            ["programme_id"],
            ["programmes.id"],
            name=op.f("fk_batch_challenges_programme_id_programmes"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_batch_challenges")),
    )
    with op.batch_alter_table("payments") as batch:
        batch.add_column(sa.Column("batch_challenge_id", sa.BigInteger(), nullable=True))
        batch.create_index(batch.f("ix_payments_batch_challenge_id"), ["batch_challenge_id"])


def downgrade() -> None:
    with op.batch_alter_table("payments") as batch:
        batch.drop_index(batch.f("ix_payments_batch_challenge_id"))
        batch.drop_column("batch_challenge_id")
    op.drop_table("batch_challenges")
