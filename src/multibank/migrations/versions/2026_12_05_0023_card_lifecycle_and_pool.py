"""card lifecycle and pool: expiry on the programme clock (D24) and unassigned pool cards (D31)

`managed_cards.expires_at`: the programme-clock ms at which the card's expiry month ends;
`expiry_notice_at`: when CARD_ABOUT_TO_EXPIRE was sent for the current expiry (once);
`lifecycle_due_at`: when the card's next lifecycle step falls due, indexed so the clock's steps
read only the due cards. Existing cards get them from their `expiry_mmyy`.

Pool cards are cards without an owner until assigned: `identity_id` allows NULL, and
`pool_reference` (the externalReference, unique in the programme) and the `activation_code_hash`
of migration 0022 (a keyed hash, never the code) say how to claim one.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-05 09:00:00
"""

from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _month_start(year: int, month_index: int) -> int:
    """Epoch ms of the first instant (UTC) of month `month_index` (0-based) after January of
    `year`."""
    y, m = divmod(month_index, 12)
    return int(datetime(year + y, m + 1, 1, tzinfo=UTC).timestamp() * 1000)


def upgrade() -> None:
    with op.batch_alter_table("managed_cards") as batch:
        batch.alter_column("identity_id", existing_type=ID, nullable=True)
        batch.add_column(sa.Column("expires_at", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("expiry_notice_at", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("lifecycle_due_at", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("pool_reference", sa.String(length=50), nullable=True))
    cards = sa.table(
        "managed_cards",
        sa.column("id", sa.BigInteger),
        sa.column("state", sa.String),
        sa.column("created_at", sa.BigInteger),
        sa.column("expiry_mmyy", sa.String),
        sa.column("expires_at", sa.BigInteger),
        sa.column("lifecycle_due_at", sa.BigInteger),
    )
    conn = op.get_bind()
    for card_id, state, created_at, expiry in conn.execute(
        sa.select(cards.c.id, cards.c.state, cards.c.created_at, cards.c.expiry_mmyy)
    ).all():
        # The expiry's century is the one that puts it after the card's creation.
        created = datetime.fromtimestamp(created_at / 1000, tz=UTC)
        year = created.year - created.year % 100 + int(expiry[2:])
        if year < created.year:
            year += 100
        ends = _month_start(year, int(expiry[:2]))  # the month after the expiry month
        notice = _month_start(year, int(expiry[:2]) - 1)
        conn.execute(
            sa.update(cards)
            .where(cards.c.id == card_id)
            .values(expires_at=ends, lifecycle_due_at=None if state == "DESTROYED" else notice)
        )
    with op.batch_alter_table("managed_cards") as batch:
        batch.alter_column("expires_at", existing_type=sa.BigInteger(), nullable=False)
        batch.create_index("ix_managed_cards_lifecycle_due", ["lifecycle_due_at"])
        batch.create_unique_constraint(
            op.f("uq_managed_cards_programme_id_pool_reference"),
            ["programme_id", "pool_reference"],
        )


def downgrade() -> None:
    op.execute(sa.text("DELETE FROM managed_cards WHERE identity_id IS NULL"))
    with op.batch_alter_table("managed_cards") as batch:
        batch.drop_constraint(op.f("uq_managed_cards_programme_id_pool_reference"), type_="unique")
        batch.drop_index("ix_managed_cards_lifecycle_due")
        batch.drop_column("pool_reference")
        batch.drop_column("lifecycle_due_at")
        batch.drop_column("expiry_notice_at")
        batch.drop_column("expires_at")
        batch.alter_column("identity_id", existing_type=ID, nullable=False)
