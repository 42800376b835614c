"""The ledger is append-only (issue 33, decision 0043): a hold is settled or released by new
postings that name it, never by changing it; the database itself refuses UPDATE and DELETE on
postings; `ledger verify` checks each account's chain and names its first break."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select, text
from sqlalchemy.exc import DBAPIError

from multibank.container import Container
from multibank.kernel.db import Database
from multibank.kernel.ids import new_id
from multibank.kernel.migrate import upgrade
from multibank.ledger import service as ledger
from multibank.ledger import statements
from multibank.ledger.models import SETTLEMENT, LedgerAccount, Posting
from multibank.reconciliation import verify
from tests.conftest import ProgrammeFactory

NOW = 1_700_000_000_000
FUNDS = 10_000
HELD = 1_500


async def _funded(container: Container, programme_id: int) -> tuple[int, int]:
    """A customer account holding FUNDS (from the settlement account), and the destination
    account a hold is paid to."""
    source, destination = sorted(new_id() for _ in range(2))
    async with container.db.sessionmaker() as db:
        for account_id in (source, destination):
            await ledger.open_account(db, programme_id, "EUR", NOW, account_id)
        settlement = await ledger.system_account(db, programme_id, SETTLEMENT, "EUR", NOW)
        await ledger.post(
            db,
            programme_id=programme_id,
            type_="DEPOSIT",
            legs=[
                ledger.Leg(source, "EUR", FUNDS, FUNDS),
                ledger.Leg(settlement, "EUR", -FUNDS, -FUNDS, guarded=False),
            ],
            now_ms=NOW,
        )
        await db.commit()
    return source, destination


async def _hold(container: Container, programme_id: int, source: int) -> int:
    transaction_id = new_id()
    async with container.db.sessionmaker() as db:
        await ledger.reserve(
            db,
            programme_id=programme_id,
            type_="SEND",
            account_id=source,
            currency="EUR",
            total=HELD,
            now_ms=NOW + 1,
            details={},
            transaction_id=transaction_id,
        )
        await db.commit()
    return transaction_id


async def _postings(container: Container, transaction_id: int) -> list[tuple[Any, ...]]:
    async with container.db.sessionmaker() as db:
        rows = await db.execute(
            select(
                Posting.id,
                Posting.account_id,
                Posting.available_amount,
                Posting.actual_amount,
                Posting.available_after,
                Posting.actual_after,
                Posting.pending_id,
            )
            .where(Posting.transaction_id == transaction_id)
            .order_by(Posting.seq, Posting.account_id)
        )
        return [tuple(r) for r in rows.all()]


@pytest.mark.parametrize("ending", ["settle", "release"])
async def test_a_hold_ends_by_new_postings_that_name_it(
    container: Container, programme: ProgrammeFactory, ending: str
) -> None:
    programme_id = int((await programme()).id)
    source, destination = await _funded(container, programme_id)
    transaction_id = await _hold(container, programme_id, source)
    held = await _postings(container, transaction_id)
    assert sorted(p[2:4] for p in held) == [(-HELD, 0), (HELD, 0)]
    async with container.db.sessionmaker() as db:
        if ending == "settle":
            await ledger.settle(
                db,
                programme_id=programme_id,
                transaction_id=transaction_id,
                account_id=source,
                currency="EUR",
                total=HELD,
                credits=[ledger.Leg(destination, "EUR", HELD, HELD, guarded=False)],
                now_ms=NOW + 2,
            )
        else:
            await ledger.release(
                db,
                programme_id=programme_id,
                transaction_id=transaction_id,
                account_id=source,
                currency="EUR",
                total=HELD,
                now_ms=NOW + 2,
                state="REJECTED",
            )
        await db.commit()
    after = await _postings(container, transaction_id)
    # What was written stays as it was; the closings name the hold's postings.
    assert [p for p in after if p[0] in {h[0] for h in held}] == held
    closings = {p[6]: p for p in after if p[6] is not None}
    hold_of = {h[1]: h for h in held}
    assert set(closings) == {h[0] for h in held}
    source_closing = next(p for p in closings.values() if p[1] == source)
    if ending == "settle":
        assert source_closing[2:6] == (0, -HELD, FUNDS - HELD, FUNDS - HELD)
    else:
        assert source_closing[2:6] == (HELD, 0, FUNDS, FUNDS)
    assert source_closing[6] == hold_of[source][0]
    # The source's statement: still one entry for the payment, with its current figures.
    async with container.db.sessionmaker() as db:
        page = await statements.statement(db, statements.StatementQuery(source))
        balance = await ledger.balances(db, source)
        problems = await verify(db, programme_id)
    [entry] = [e for e in page.entries if e.transaction_id == transaction_id]
    moved = -HELD if ending == "settle" else 0
    assert (entry.available_amount, entry.actual_amount) == (moved, moved)
    assert (entry.available_after, entry.actual_after) == balance == (FUNDS + moved,) * 2
    assert entry.entry_state == "COMPLETED"
    assert page.count == len(page.entries) == 2  # the deposit, the payment
    assert problems == []


async def test_the_database_refuses_to_change_or_remove_a_posting(
    container: Container, programme: ProgrammeFactory
) -> None:
    programme_id = int((await programme()).id)
    source, _ = await _funded(container, programme_id)
    refused = [
        "UPDATE postings SET available_after = available_after + 1 WHERE account_id = :a",
        "DELETE FROM postings WHERE account_id = :a",
    ]
    if container.db.engine.dialect.name == "postgresql":
        refused.append("TRUNCATE postings CASCADE")
    for sql in refused:
        with pytest.raises(DBAPIError, match="append-only"):
            async with container.db.engine.begin() as conn:
                await conn.execute(text(sql), {"a": source})
    async with container.db.sessionmaker() as db:
        count = await db.scalar(
            select(LedgerAccount.posting_count).where(LedgerAccount.id == source)
        )
        rows = (await db.scalars(select(Posting.id).where(Posting.account_id == source))).all()
    assert count == len(rows) == 1  # the deposit


async def test_a_transactions_details_and_an_events_payload_are_written_once(
    container: Container, programme: ProgrammeFactory
) -> None:
    """Issue 41 §5: what a movement said (`ledger_transactions.details`) and what a webhook event
    says (`webhook_events.payload`) are never rewritten: the database refuses an UPDATE that
    changes them, whoever runs it, while their other columns (a transaction's state, an event's
    delivery state) still change as the server needs."""
    programme_id = int((await programme()).id)
    source, _ = await _funded(container, programme_id)
    event_id = new_id()
    async with container.db.engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO webhook_events (id, programme_id, path, event_type, resource,"
                " call_ref, payload, state, attempts, created_at)"
                " VALUES (:id, :p, '/x/watch', 'x.Y', 'x:1', :ref, '{}', 'PENDING', 0, 0)"
            ),
            {"id": event_id, "p": programme_id, "ref": f"ref-{event_id}"},
        )
    tx = "SELECT transaction_id FROM postings WHERE account_id = :a"
    for sql in (
        f"UPDATE ledger_transactions SET details = '{{\"x\": 1}}' WHERE id IN ({tx})",
        "UPDATE webhook_events SET payload = '{\"forged\": true}' WHERE id = :e",
    ):
        with pytest.raises(DBAPIError, match="is written once"):
            async with container.db.engine.begin() as conn:
                await conn.execute(text(sql), {"a": source, "e": event_id})
    async with container.db.engine.begin() as conn:
        await conn.execute(
            text(
                "UPDATE ledger_transactions SET state = state, details = details"
                f" WHERE id IN ({tx})"
            ),
            {"a": source},
        )
        await conn.execute(
            text("UPDATE webhook_events SET state = 'FAILED', attempts = 5 WHERE id = :e"),
            {"e": event_id},
        )


POSTING = (
    "INSERT INTO postings (id, programme_id, transaction_id, account_id, currency,"
    " available_amount, actual_amount, available_after, actual_after, created_at, seq)"
    " VALUES (:id, 1, :t, :a, 'EUR', :amount, :amount, :after, :after, 0, :seq)"
)


async def test_verify_names_the_first_break_of_an_accounts_chain(fresh_database_url: str) -> None:
    """Postings inserted as they are (INSERT is allowed) whose third balance after does not
    follow: `verify` names that account and posting, once, and nothing else is wrong."""
    db = Database(fresh_database_url)
    try:
        await upgrade(db)
        async with db.engine.begin() as conn:
            await conn.execute(
                text(
                    "INSERT INTO programmes (id, name, mode, step_up_required, failed_login_limit,"
                    " iban_allocation_delay_seconds, clock_offset_ms, created_at)"
                    " VALUES (1, 'p', 'sandbox', false, 5, 2, 0, 0)"
                )
            )
            for account_id, kind, balance in ((10, "MANAGED_ACCOUNT", 60), (11, "SETTLEMENT", -60)):
                await conn.execute(
                    text(
                        "INSERT INTO ledger_accounts (id, programme_id, kind, currency, available,"
                        " actual, created_at, posting_count, closing_count, movement_count)"
                        " VALUES (:id, 1, :kind, 'EUR', :b, :b, 0, 3, 0, 3)"
                    ),
                    {"id": account_id, "kind": kind, "b": balance},
                )
            # Three deposits of 20; the customer's second one records 25 after instead of 40,
            # and its third 60 again (right from 40, but the chain broke before it).
            for n, (customer_after, settlement_after) in enumerate(
                ((20, -20), (25, -40), (60, -60)), start=1
            ):
                await conn.execute(
                    text(
                        "INSERT INTO ledger_transactions (id, programme_id, type, state, details,"
                        " created_at) VALUES (:id, 1, 'DEPOSIT', 'COMPLETED', '{}', 0)"
                    ),
                    {"id": 100 + n},
                )
                for offset, account_id, amount, after in (
                    (0, 10, 20, customer_after),
                    (1, 11, -20, settlement_after),
                ):
                    await conn.execute(
                        text(POSTING),
                        {
                            "id": 1000 + 10 * n + offset,
                            "t": 100 + n,
                            "a": account_id,
                            "amount": amount,
                            "after": after,
                            "seq": n,
                        },
                    )
        async with db.transaction() as session:
            problems = await verify(session)
        assert [(v.what, v.detail.split(" has ")[0]) for v in problems] == [
            ("posting chain broken", "account 10: posting 1020 (place 2)")
        ]
        assert problems[0].detail.endswith("balances after 25/25, its chain makes them 40/40")
    finally:
        await db.dispose()
