"""linked accounts: an identity's accounts at other banks and their verification (issue 43 §4,
D39, decision 0087)

- `linked_accounts`: the account (its owner, profile, holder's name, type, country, currency,
  reference and the reference's normal key), its state and its time.
- `linked_account_runs`: its verification runs (state, when decided, why overridden).
- `linked_account_steps`: each run's steps (status, details, the transfer instruction's
  reference, when done).
- Every existing programme gets its linked-account profile (`linkedAccounts`), over EUR and GBP
  where its profiles serve them; new programmes get it from
  `programmes.service.create_programme`.

Revision ID: 0031
Revises: 0030
Create Date: 2026-12-08 02:00:00
"""

import json
import time
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from multibank.kernel.ids import IdGenerator

revision: str = "0031"
down_revision: str | None = "0030"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
KIND = "linkedAccounts"
CURRENCIES = ("EUR", "GBP")


def upgrade() -> None:
    op.create_table(
        "linked_accounts",
        sa.Column("id", ID, autoincrement=False, nullable=False),
        sa.Column("programme_id", ID, nullable=False),
        sa.Column("identity_id", ID, nullable=False),
        sa.Column("identity_type", sa.String(length=10), nullable=False),
        sa.Column("profile_id", ID, nullable=False),
        sa.Column("tag", sa.String(length=50), nullable=True),
        sa.Column("friendly_name", sa.String(length=50), nullable=True),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("type", sa.String(length=10), nullable=False),
        sa.Column("country", sa.String(length=2), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("account_reference", sa.JSON(), nullable=False),
        sa.Column("reference_key", sa.String(length=120), nullable=False),
        sa.Column("state", sa.String(length=20), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["identity_id"],
            ["identities.id"],
            name=op.f("fk_linked_accounts_identity_id_identities"),
        ),
        sa.ForeignKeyConstraint(
            ["profile_id"], ["profiles.id"], name=op.f("fk_linked_accounts_profile_id_profiles")
        ),
        sa.ForeignKeyConstraint(
            ["programme_id"],
            ["programmes.id"],
            name=op.f("fk_linked_accounts_programme_id_programmes"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_linked_accounts")),
    )
    op.create_index(
        "ix_linked_accounts_owner",
        "linked_accounts",
        ["programme_id", "identity_id", "created_at", "id"],
    )
    op.create_table(
        "linked_account_runs",
        sa.Column("id", ID, autoincrement=False, nullable=False),
        sa.Column("programme_id", ID, nullable=False),
        sa.Column("linked_account_id", ID, nullable=False),
        sa.Column("state", sa.String(length=10), nullable=False),
        sa.Column("completed_at", sa.BigInteger(), nullable=True),
        sa.Column("overridden_reason", sa.String(length=50), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["linked_account_id"],
            ["linked_accounts.id"],
            name=op.f("fk_linked_account_runs_linked_account_id_linked_accounts"),
        ),
        sa.ForeignKeyConstraint(
            ["programme_id"],
            ["programmes.id"],
            name=op.f("fk_linked_account_runs_programme_id_programmes"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_linked_account_runs")),
    )
    op.create_index(
        op.f("ix_linked_account_runs_linked_account_id"),
        "linked_account_runs",
        ["linked_account_id"],
    )
    op.create_table(
        "linked_account_steps",
        sa.Column("id", ID, autoincrement=False, nullable=False),
        sa.Column("programme_id", ID, nullable=False),
        sa.Column("run_id", ID, nullable=False),
        sa.Column("step", sa.String(length=40), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("details", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("reference", sa.String(length=13), nullable=True),
        sa.Column("completed_at", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["linked_account_runs.id"],
            name=op.f("fk_linked_account_steps_run_id_linked_account_runs"),
        ),
        sa.ForeignKeyConstraint(
            ["programme_id"],
            ["programmes.id"],
            name=op.f("fk_linked_account_steps_programme_id_programmes"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_linked_account_steps")),
        sa.UniqueConstraint("run_id", "step", name=op.f("uq_linked_account_steps_run_id_step")),
    )
    op.create_index(
        op.f("ix_linked_account_steps_reference"), "linked_account_steps", ["reference"]
    )
    _add_profiles()


def _add_profiles() -> None:
    """Each programme's linked-account profile, over EUR and GBP where its profiles serve
    them (as `create_programme` makes them)."""
    conn = op.get_bind()
    profiles = sa.table(
        "profiles",
        sa.column("id", sa.BigInteger()),
        sa.column("programme_id", sa.BigInteger()),
        sa.column("kind", sa.String()),
        sa.column("currencies", sa.JSON()),
        sa.column("active", sa.Boolean()),
        sa.column("created_at", sa.BigInteger()),
    )
    now = int(time.time() * 1000)
    ids = IdGenerator()
    served: dict[int, set[str]] = {}
    for programme_id, currencies in conn.execute(
        sa.select(profiles.c.programme_id, profiles.c.currencies)
    ):
        values = json.loads(currencies) if isinstance(currencies, str) else currencies
        served.setdefault(int(programme_id), set()).update(values or [])
    rows = [
        {
            "id": ids.next_int(),
            "programme_id": programme_id,
            "kind": KIND,
            "currencies": [c for c in CURRENCIES if c in currencies],
            "active": True,
            "created_at": now,
        }
        for programme_id, currencies in served.items()
    ]
    if rows:
        op.bulk_insert(profiles, rows)


def downgrade() -> None:
    op.execute(f"DELETE FROM profiles WHERE kind = '{KIND}'")
    op.drop_index(op.f("ix_linked_account_steps_reference"), table_name="linked_account_steps")
    op.drop_table("linked_account_steps")
    op.drop_index(
        op.f("ix_linked_account_runs_linked_account_id"), table_name="linked_account_runs"
    )
    op.drop_table("linked_account_runs")
    op.drop_index("ix_linked_accounts_owner", table_name="linked_accounts")
    op.drop_table("linked_accounts")
