"""trusted beneficiaries: batches and beneficiaries, and the beneficiary or linked account a
payment paid (issue 43 §3 and §4, D38, D39, decisions 0087 and 0088)

Revision ID: 0032
Revises: 0031
Create Date: 2026-12-08 01:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0032"
down_revision: str | None = "0031"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "beneficiary_batches",
        sa.Column("id", ID, autoincrement=False, nullable=False),
        sa.Column("programme_id", ID, nullable=False),
        sa.Column("identity_id", sa.BigInteger(), nullable=False),
        sa.Column("operation", sa.String(10), nullable=False),
        sa.Column("tag", sa.String(50), nullable=True),
        sa.Column("state", sa.String(25), nullable=False),
        sa.Column("challenge_channel", sa.String(10), nullable=True),
        sa.Column("challenge_user_id", sa.BigInteger(), nullable=True),
        sa.Column("challenge_started_at", sa.BigInteger(), nullable=True),
        sa.Column("challenge_failures", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["programme_id"],
            ["programmes.id"],
            name=op.f("fk_beneficiary_batches_programme_id_programmes"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_beneficiary_batches")),
    )
    op.create_index(
        "ix_beneficiary_batches_owner",
        "beneficiary_batches",
        ["programme_id", "identity_id", "created_at", "id"],
    )
    op.create_table(
        "beneficiaries",
        sa.Column("id", ID, autoincrement=False, nullable=False),
        sa.Column("programme_id", ID, nullable=False),
        sa.Column("identity_id", sa.BigInteger(), nullable=False),
        sa.Column("batch_id", sa.BigInteger(), nullable=False),
        sa.Column("remove_batch_id", sa.BigInteger(), nullable=True),
        sa.Column("batches", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(25), nullable=False),
        sa.Column("validation_failure", sa.String(50), nullable=True),
        sa.Column("external_refs", sa.JSON(), nullable=True),
        sa.Column("group", sa.String(150), nullable=True),
        sa.Column("information", sa.JSON(), nullable=False),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.Column("kind", sa.String(10), nullable=False),
        sa.Column("instrument_type", sa.String(20), nullable=True),
        sa.Column("instrument_id", sa.BigInteger(), nullable=True),
        sa.Column("iban", sa.String(34), nullable=True),
        sa.Column("account_number", sa.String(8), nullable=True),
        sa.Column("sort_code", sa.String(6), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["programme_id"],
            ["programmes.id"],
            name=op.f("fk_beneficiaries_programme_id_programmes"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_beneficiaries")),
    )
    op.create_index(
        "ix_beneficiaries_owner",
        "beneficiaries",
        ["programme_id", "identity_id", "created_at", "id"],
    )
    with op.batch_alter_table("payments") as batch:
        batch.add_column(sa.Column("beneficiary_id", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("linked_account_id", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("payments") as batch:
        batch.drop_column("linked_account_id")
        batch.drop_column("beneficiary_id")
    op.drop_index("ix_beneficiaries_owner", "beneficiaries")
    op.drop_table("beneficiaries")
    op.drop_index("ix_beneficiary_batches_owner", "beneficiary_batches")
    op.drop_table("beneficiary_batches")
