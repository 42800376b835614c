"""physical cards: upgrade, manufacturing, activation, PIN, replacement (D21, D25)

Columns of `managed_cards` that are NULL (or false) until a card is upgraded to physical; the
activation code is kept as a keyed hash and the PIN encrypted, never in clear.
`card_data_tokens`: the values the sandbox's `secure_session/tokenize` made tokens of.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-05 12:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("managed_cards") as batch:
        batch.add_column(sa.Column("product_reference", sa.String(20), nullable=True))
        batch.add_column(sa.Column("carrier_type", sa.String(20), nullable=True))
        batch.add_column(sa.Column("delivery_address", sa.JSON(none_as_null=True), nullable=True))
        batch.add_column(sa.Column("delivery_method", sa.String(20), nullable=True))
        batch.add_column(
            sa.Column("pending_activation", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch.add_column(
            sa.Column("pin_blocked", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch.add_column(sa.Column("manufacturing_state", sa.String(24), nullable=True))
        batch.add_column(sa.Column("manufacturing_requested_at", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("manufacturing_due_at", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("activation_code_hash", sa.String(64), nullable=True))
        batch.add_column(sa.Column("pin_encrypted", sa.String(200), nullable=True))
        batch.add_column(sa.Column("replacement_id", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("replacement_reason", sa.String(12), nullable=True))
        batch.add_column(sa.Column("reported", sa.String(6), nullable=True))
    op.create_index("ix_managed_cards_manufacturing_due", "managed_cards", ["manufacturing_due_at"])
    op.create_table(
        "card_data_tokens",
        sa.Column("id", ID, primary_key=True, autoincrement=False),
        sa.Column("programme_id", ID, sa.ForeignKey("programmes.id"), nullable=False),
        sa.Column("identity_id", ID, sa.ForeignKey("identities.id"), nullable=True),
        sa.Column("token", sa.String(24), nullable=False),
        sa.Column("field", sa.String(12), nullable=False),
        sa.Column("value_encrypted", sa.String(300), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.UniqueConstraint("programme_id", "token"),
    )


def downgrade() -> None:
    op.drop_table("card_data_tokens")
    op.drop_index("ix_managed_cards_manufacturing_due", table_name="managed_cards")
    with op.batch_alter_table("managed_cards") as batch:
        for column in (
            "reported",
            "replacement_reason",
            "replacement_id",
            "pin_encrypted",
            "activation_code_hash",
            "manufacturing_due_at",
            "manufacturing_requested_at",
            "manufacturing_state",
            "pin_blocked",
            "pending_activation",
            "delivery_method",
            "delivery_address",
            "carrier_type",
            "product_reference",
        ):
            batch.drop_column(column)
