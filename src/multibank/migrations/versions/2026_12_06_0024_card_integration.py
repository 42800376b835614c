"""card integration: wrong-PIN count of physical cards (D25) and profile-level spend rules (D22)

`managed_cards.pin_failures`: consecutive wrong PINs given in card-present simulator purchases;
the third sets `pin_blocked`, a right PIN or a PIN unblock sets it back to 0.
`profiles.spend_rules`: the card profile's common spend rules as the operator set them (wire
form); NULL while none are set, and on every profile that is not a card profile.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-06 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("managed_cards") as batch:
        batch.add_column(
            sa.Column("pin_failures", sa.Integer(), nullable=False, server_default="0")
        )
    with op.batch_alter_table("profiles") as batch:
        batch.add_column(sa.Column("spend_rules", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("profiles") as batch:
        batch.drop_column("spend_rules")
    with op.batch_alter_table("managed_cards") as batch:
        batch.drop_column("pin_failures")
