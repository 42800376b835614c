"""webhook pending indexes: due work found among pending events only (issue 40 §6, decision 0062)

Two partial indexes of `webhook_events` holding pending events only (`WHERE state = 'PENDING'`,
which PostgreSQL and SQLite both support): `ix_webhook_events_pending` (id), the claim's walk
oldest first; `ix_webhook_events_pending_resource` (programme_id, resource, id), whether an event
is the oldest pending one of its resource and which are its next ones. A delivered or failed
event leaves both, so a delivery round no longer reads the history. `ix_webhook_events_due`
(state, next_attempt_at), which only the claim used, is dropped.

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-07 15:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0027"
down_revision: str | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PENDING = sa.text("state = 'PENDING'")


def upgrade() -> None:
    op.create_index(
        "ix_webhook_events_pending",
        "webhook_events",
        ["id"],
        postgresql_where=PENDING,
        sqlite_where=PENDING,
    )
    op.create_index(
        "ix_webhook_events_pending_resource",
        "webhook_events",
        ["programme_id", "resource", "id"],
        postgresql_where=PENDING,
        sqlite_where=PENDING,
    )
    op.drop_index("ix_webhook_events_due", table_name="webhook_events")


def downgrade() -> None:
    op.create_index("ix_webhook_events_due", "webhook_events", ["state", "next_attempt_at"])
    op.drop_index("ix_webhook_events_pending_resource", table_name="webhook_events")
    op.drop_index("ix_webhook_events_pending", table_name="webhook_events")
