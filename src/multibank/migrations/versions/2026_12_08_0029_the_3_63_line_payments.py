"""the 3.63 line's payments: Confirmation of Payee outcomes, cancellation and scheduling (issue
43 §5 and §6, decisions 0084 and 0085)

- `payments.validation_outcomes`: the Confirmation of Payee outcomes of a GBP wire transfer made
  through the 3.63 line (`validationOutcomes`), as answered at its create.
- `payments.cancellation_reason`: the reason its payer gave when cancelling it.
- `payments.scheduled_at`, `payments.executed_at`: when its payer asked it to go (programme
  clock, epoch ms) and when it reached the state it ended in.

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-08 00:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0029"
down_revision: str | None = "0028"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("payments") as batch:
        batch.add_column(sa.Column("validation_outcomes", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("cancellation_reason", sa.String(50), nullable=True))
        batch.add_column(sa.Column("scheduled_at", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("executed_at", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("payments") as batch:
        batch.drop_column("executed_at")
        batch.drop_column("scheduled_at")
        batch.drop_column("cancellation_reason")
        batch.drop_column("validation_outcomes")
