"""card spend rules: a card's card-level rules, a JSON column on the card (D22)

NULL while the card has no rules. Profile-level rules are the operator's on the card profile and
identity-level rules are not built, so nothing else is stored.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-03 12:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "managed_cards", sa.Column("spend_rules", sa.JSON(none_as_null=True), nullable=True)
    )


def downgrade() -> None:
    with op.batch_alter_table("managed_cards") as batch:
        batch.drop_column("spend_rules")
