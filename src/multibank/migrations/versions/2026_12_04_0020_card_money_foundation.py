"""card money foundation: card fees per programme, and the card steps of the ledger

`programmes.card_fees`: the operator's card fees (D19) as `{"purchase": {"EUR": 10}, ...}`;
NULL or a missing entry means the default. `card_movements`: one row per ledger transaction a
card caused (authorisation, settlement, reversal, expiry, refund), so a debit card's statement
finds its entries among its parent account's postings (D23, D30).

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-04 12:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.add_column("programmes", sa.Column("card_fees", sa.JSON(none_as_null=True), nullable=True))
    op.create_table(
        "card_movements",
        sa.Column("transaction_id", ID, sa.ForeignKey("ledger_transactions.id"), primary_key=True),
        sa.Column("programme_id", ID, sa.ForeignKey("programmes.id"), nullable=False),
        sa.Column("card_id", ID, sa.ForeignKey("managed_cards.id"), nullable=False),
        sa.Column("account_id", ID, sa.ForeignKey("ledger_accounts.id"), nullable=False),
        sa.Column("kind", sa.String(30), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
    )
    op.create_index(
        "ix_card_movements_card", "card_movements", ["card_id", "created_at", "transaction_id"]
    )


def downgrade() -> None:
    op.drop_index("ix_card_movements_card", table_name="card_movements")
    op.drop_table("card_movements")
    with op.batch_alter_table("programmes") as batch:
        batch.drop_column("card_fees")
