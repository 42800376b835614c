"""movement profiles: transfer, send and outgoing wire transfer profiles with their fees (D12)

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25 09:00:00

Every programme gets one profile of each movement kind, over the currencies its profiles
already serve, with the default fees (transfers 0, sends 0, outgoing wire transfers 100 minor
units in every currency). New programmes get them from `programmes.service.create_programme`.
"""

import json
import time
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from multibank.kernel.ids import IdGenerator

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

DEFAULT_FEES = {"transfers": 0, "sends": 0, "outgoingWireTransfers": 100}


def upgrade() -> None:
    with op.batch_alter_table("profiles", schema=None) as batch_op:
        batch_op.add_column(sa.Column("fees", sa.JSON(), nullable=True))
    conn = op.get_bind()
    ids = IdGenerator()  # a random node: this runs before any process serves
    now = int(time.time() * 1000)
    profiles = sa.table(
        "profiles",
        sa.column("id", sa.BigInteger),
        sa.column("programme_id", sa.BigInteger),
        sa.column("kind", sa.String),
        sa.column("currencies", sa.JSON),
        sa.column("active", sa.Boolean),
        sa.column("fees", sa.JSON),
        sa.column("created_at", sa.BigInteger),
    )
    currencies: dict[int, set[str]] = {}
    for programme_id, served in conn.execute(
        sa.select(profiles.c.programme_id, profiles.c.currencies)
    ):
        values = json.loads(served) if isinstance(served, str) else served
        currencies.setdefault(int(programme_id), set()).update(values or [])
    rows = [
        {
            "id": ids.next_int(),
            "programme_id": programme_id,
            "kind": kind,
            "currencies": sorted(served),
            "active": True,
            "fees": {currency: fee for currency in sorted(served)},
            "created_at": now,
        }
        for programme_id, served in currencies.items()
        for kind, fee in DEFAULT_FEES.items()
    ]
    if rows:
        op.bulk_insert(profiles, rows)


def downgrade() -> None:
    op.execute("DELETE FROM profiles WHERE kind IN ('transfers', 'sends', 'outgoingWireTransfers')")
    with op.batch_alter_table("profiles", schema=None) as batch_op:
        batch_op.drop_column("fees")
