"""card authorisations: the state of each approved card authorisation's hold (D23)

One row per AUTHORISATION ledger transaction (same id): the spending account and its reserved
book, held / open / settled / refunded amounts and fees, state, auth code, merchant fields,
expiry on the programme clock. Partial index of the open ones by expiry for the expiry step.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-05 12:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
OPEN = sa.text("state = 'PENDING_SETTLEMENT'")


def upgrade() -> None:
    op.create_table(
        "card_authorisations",
        sa.Column("id", ID, sa.ForeignKey("ledger_transactions.id"), primary_key=True),
        sa.Column("programme_id", ID, sa.ForeignKey("programmes.id"), nullable=False),
        sa.Column("card_id", ID, sa.ForeignKey("managed_cards.id"), nullable=False),
        sa.Column("account_id", ID, sa.ForeignKey("ledger_accounts.id"), nullable=False),
        sa.Column("reserved_account_id", ID, sa.ForeignKey("ledger_accounts.id"), nullable=False),
        sa.Column("currency", sa.String(3), nullable=False),
        sa.Column("held_amount", sa.BigInteger(), nullable=False),
        sa.Column("open_amount", sa.BigInteger(), nullable=False),
        sa.Column("settled_amount", sa.BigInteger(), nullable=False),
        sa.Column("fee_amount", sa.BigInteger(), nullable=False),
        sa.Column("refunded_amount", sa.BigInteger(), nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("auth_code", sa.String(6), nullable=False),
        sa.Column("merchant", sa.JSON(), nullable=False),
        sa.Column("settlement_id", ID, nullable=True),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
    )
    op.create_index("ix_card_authorisations_card", "card_authorisations", ["card_id", "created_at"])
    op.create_index(
        "ix_card_authorisations_open",
        "card_authorisations",
        ["expires_at"],
        sqlite_where=OPEN,
        postgresql_where=OPEN,
    )


def downgrade() -> None:
    op.drop_index("ix_card_authorisations_open", table_name="card_authorisations")
    op.drop_index("ix_card_authorisations_card", table_name="card_authorisations")
    op.drop_table("card_authorisations")
