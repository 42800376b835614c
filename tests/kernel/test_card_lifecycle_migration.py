"""Migration 0023 (D24, D31): cards made before it get their expiry time and their first
lifecycle step from their `expiryMmyy`; a destroyed card gets none; it goes back down."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import text

from multibank.kernel.db import Database
from multibank.kernel.migrate import downgrade, upgrade


def ms(year: int, month: int) -> int:
    return int(datetime(year, month, 1, tzinfo=UTC).timestamp() * 1000)


CARD = (
    "INSERT INTO managed_cards (id, programme_id, identity_id, identity_type, profile_id, mode,"
    " external_handle, friendly_name, currency, state, type, card_brand, level,"
    " number_first_six, number_last_four, number_hash, number_encrypted, version, name_on_card,"
    " cardholder_mobile, billing_address, start_mmyy, expiry_mmyy, expiry_period_months,"
    " renewal_type, created_at) VALUES (:id, 1, 3, 'CORPORATE', 2, 'PREPAID_MODE', :handle,"
    " 'Card', 'EUR', :state, 'VIRTUAL', 'MASTERCARD', 'CORPORATE', '555555', '1234', :hash,"
    " 'x', 1, 'A', '+35699123456', '{}', :start, :expiry, 36, 'NO_RENEW', :created)"
)


async def test_older_cards_get_their_expiry_and_first_step(fresh_database_url):
    db = Database(fresh_database_url)
    try:
        await upgrade(db, "0020")
        async with db.engine.begin() as conn:
            await conn.execute(
                text(
                    "INSERT INTO programmes (id, name, mode, step_up_required, failed_login_limit,"
                    " iban_allocation_delay_seconds, clock_offset_ms, created_at)"
                    " VALUES (1, 'old', 'sandbox', false, 5, 2, 0, 0)"
                )
            )
            await conn.execute(
                text(
                    "INSERT INTO profiles (id, programme_id, kind, currencies, active, created_at)"
                    " VALUES (2, 1, 'corporatePrepaidManagedCard', '[\"EUR\"]', true, 0)"
                )
            )
            await conn.execute(
                text(
                    "INSERT INTO identities (id, programme_id, type, profile_id, ip_address,"
                    " accepted_terms, fee_group, dd_status, dd_ongoing_status,"
                    " dd_permanently_rejected, created_at) VALUES (3, 1, 'CORPORATE', 2,"
                    " '127.0.0.1', true, 'DEFAULT', 'APPROVED', 'NOT_STARTED', false, 0)"
                )
            )
            created = ms(2026, 11) + 5 * 86400 * 1000
            for card_id, state, expiry in ((10, "ACTIVE", "1129"), (11, "DESTROYED", "0299")):
                await conn.execute(
                    text(CARD),
                    {
                        "id": card_id,
                        "handle": f"h{card_id}",
                        "state": state,
                        "hash": f"n{card_id}",
                        "start": "1126",
                        "expiry": expiry,
                        "created": created,
                    },
                )
        await upgrade(db)
        async with db.engine.begin() as conn:
            rows = (
                await conn.execute(
                    text(
                        "SELECT id, expires_at, lifecycle_due_at, expiry_notice_at"
                        " FROM managed_cards ORDER BY id"
                    )
                )
            ).all()
        assert [tuple(r) for r in rows] == [
            (10, ms(2029, 12), ms(2029, 11), None),
            # The century that puts the expiry after the card's creation; destroyed: no step.
            (11, ms(2099, 3), None, None),
        ]
        await downgrade(db, "0020")
        await upgrade(db)
    finally:
        await db.dispose()
