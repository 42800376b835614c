"""session step-up time: when a session last stepped up (cards.md §8.1, decision 0059)

`auth_sessions.stepped_up_at`: the programme-clock time (ms) of the session's last step-up (OTP
verify or completed push), NULL while it has not stepped up. A later session of the same user
that has not stepped up may read the card-statement entries posted while a recent step-up was in
force (docs/decisions/0059). Sessions that stepped up before this migration keep NULL: they
count as stepped up for themselves, and as no recent step-up for others.

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-07 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0026"
down_revision: str | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("auth_sessions") as batch:
        batch.add_column(sa.Column("stepped_up_at", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("auth_sessions") as batch:
        batch.drop_column("stepped_up_at")
