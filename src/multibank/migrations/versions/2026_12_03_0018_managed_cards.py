"""managed cards: the card table and every programme's four card profiles (D19, D20)

A card's number is never stored in clear: its first six and last four digits, a keyed hash
(unique in the programme) and the number encrypted under the card-data key. A prepaid card's
money is in the ledger account with the card's id, opened with the card; a debit card has no
ledger account and names its parent managed account.

Every existing programme gets the four card profiles (corporate and consumer, prepaid and
debit) over the currencies its profiles already serve; new programmes get them from
`programmes.service.create_programme`.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-03 09:00:00
"""

import json
import time
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from multibank.kernel.ids import IdGenerator

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
CARD_KINDS = (
    "corporatePrepaidManagedCard",
    "corporateDebitManagedCard",
    "consumerPrepaidManagedCard",
    "consumerDebitManagedCard",
)


def upgrade() -> None:
    op.create_table(
        "managed_cards",
        sa.Column("id", ID, autoincrement=False, nullable=False),
        sa.Column("programme_id", ID, nullable=False),
        sa.Column("identity_id", ID, nullable=False),
        sa.Column("identity_type", sa.String(length=10), nullable=False),
        sa.Column("profile_id", ID, nullable=False),
        sa.Column("mode", sa.String(length=12), nullable=False),
        sa.Column("parent_account_id", ID, nullable=True),
        sa.Column("external_handle", sa.String(length=24), nullable=False),
        sa.Column("friendly_name", sa.String(length=50), nullable=False),
        sa.Column("tag", sa.String(length=50), nullable=True),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("state", sa.String(length=10), nullable=False),
        sa.Column("blocked_reason", sa.String(length=10), nullable=True),
        sa.Column("destroyed_reason", sa.String(length=10), nullable=True),
        sa.Column("type", sa.String(length=10), nullable=False),
        sa.Column("card_brand", sa.String(length=12), nullable=False),
        sa.Column("level", sa.String(length=10), nullable=False),
        sa.Column("number_first_six", sa.String(length=6), nullable=False),
        sa.Column("number_last_four", sa.String(length=4), nullable=False),
        sa.Column("number_hash", sa.String(length=64), nullable=False),
        sa.Column("number_encrypted", sa.String(length=200), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("name_on_card", sa.String(length=27), nullable=False),
        sa.Column("name_on_card_line2", sa.String(length=27), nullable=True),
        sa.Column("cardholder_mobile", sa.String(length=20), nullable=False),
        sa.Column("billing_address", sa.JSON(), nullable=False),
        sa.Column("start_mmyy", sa.String(length=4), nullable=False),
        sa.Column("expiry_mmyy", sa.String(length=4), nullable=False),
        sa.Column("expiry_period_months", sa.Integer(), nullable=False),
        sa.Column("renewal_type", sa.String(length=10), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["identity_id"],
            ["identities.id"],
            name=op.f("fk_managed_cards_identity_id_identities"),
        ),
        sa.ForeignKeyConstraint(
            ["parent_account_id"],
            ["managed_accounts.id"],
            name=op.f("fk_managed_cards_parent_account_id_managed_accounts"),
        ),
        sa.ForeignKeyConstraint(
            ["profile_id"], ["profiles.id"], name=op.f("fk_managed_cards_profile_id_profiles")
        ),
        sa.ForeignKeyConstraint(
            ["programme_id"],
            ["programmes.id"],
            name=op.f("fk_managed_cards_programme_id_programmes"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_managed_cards")),
        sa.UniqueConstraint("external_handle", name=op.f("uq_managed_cards_external_handle")),
        sa.UniqueConstraint(
            "programme_id", "number_hash", name=op.f("uq_managed_cards_programme_id_number_hash")
        ),
    )
    op.create_index(
        "ix_managed_cards_owner", "managed_cards", ["programme_id", "identity_id", "id"]
    )
    op.create_index("ix_managed_cards_parent", "managed_cards", ["parent_account_id"])
    _card_profiles()


def _card_profiles() -> None:
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
            "created_at": now,
        }
        for programme_id, served in currencies.items()
        for kind in CARD_KINDS
    ]
    if rows:
        op.bulk_insert(profiles, rows)


def downgrade() -> None:
    op.drop_index("ix_managed_cards_parent", table_name="managed_cards")
    op.drop_index("ix_managed_cards_owner", table_name="managed_cards")
    op.drop_table("managed_cards")
    kinds = ", ".join(f"'{kind}'" for kind in CARD_KINDS)
    op.execute(f"DELETE FROM profiles WHERE kind IN ({kinds})")
