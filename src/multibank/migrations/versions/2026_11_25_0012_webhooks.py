"""webhooks: a programme's URL and secret, events and their delivery attempts (D16)

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-25 12:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("programmes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("webhook_url", sa.String(length=2000), nullable=True))
        batch_op.add_column(sa.Column("webhook_secret", sa.String(length=100), nullable=True))
    op.create_table(
        "webhook_events",
        sa.Column("id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("programme_id", sa.BigInteger(), nullable=False),
        sa.Column("path", sa.String(length=60), nullable=False),
        sa.Column("event_type", sa.String(length=80), nullable=False),
        sa.Column("resource", sa.String(length=80), nullable=False),
        sa.Column("call_ref", sa.String(length=64), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("state", sa.String(length=10), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.BigInteger(), nullable=True),
        sa.Column("lease_until", sa.BigInteger(), nullable=True),
        sa.Column("last_status", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.String(length=300), nullable=True),
        sa.Column("delivered_at", sa.BigInteger(), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["programme_id"],
            ["programmes.id"],
            name=op.f("fk_webhook_events_programme_id_programmes"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_events")),
        sa.UniqueConstraint("call_ref", name=op.f("uq_webhook_events_call_ref")),
    )
    op.create_index("ix_webhook_events_due", "webhook_events", ["state", "next_attempt_at"])
    op.create_index(
        "ix_webhook_events_resource", "webhook_events", ["programme_id", "resource", "id"]
    )
    op.create_index("ix_webhook_events_programme", "webhook_events", ["programme_id", "id"])
    op.create_table(
        "webhook_attempts",
        sa.Column("id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("event_id", sa.BigInteger(), nullable=False),
        sa.Column("url", sa.String(length=2100), nullable=False),
        sa.Column("attempted_at", sa.BigInteger(), nullable=False),
        sa.Column("duration_ms", sa.Integer(), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("error", sa.String(length=300), nullable=True),
        sa.Column("excerpt", sa.String(length=200), nullable=True),
        sa.Column("outcome", sa.String(length=10), nullable=False),
        sa.ForeignKeyConstraint(
            ["event_id"],
            ["webhook_events.id"],
            name=op.f("fk_webhook_attempts_event_id_webhook_events"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_attempts")),
    )
    op.create_index(op.f("ix_webhook_attempts_event_id"), "webhook_attempts", ["event_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_webhook_attempts_event_id"), table_name="webhook_attempts")
    op.drop_table("webhook_attempts")
    op.drop_index("ix_webhook_events_programme", table_name="webhook_events")
    op.drop_index("ix_webhook_events_resource", table_name="webhook_events")
    op.drop_index("ix_webhook_events_due", table_name="webhook_events")
    op.drop_table("webhook_events")
    with op.batch_alter_table("programmes", schema=None) as batch_op:
        batch_op.drop_column("webhook_secret")
        batch_op.drop_column("webhook_url")
