"""Database round trips of a simulated card purchase (issue 34's speed goal): counted, not timed.

A purchase is an authorisation and its settlement in one transaction; every statement the
server sends for it is counted (BEGIN and COMMIT too), on both databases, with the programme's
system accounts already known (a programme's first purchase creates them)."""

from __future__ import annotations

from multibank.kernel.context import Container
from tests.api.test_card_payments import debit, limit, purchase
from tests.api.test_round_trips import counting
from tests.factories import verified

# BEGIN, the programme, the card (locked), its spend windows, the accounts (locked), the two
# ledger movements, the authorisation's row and the movements' rows, COMMIT. A movement is one
# statement on PostgreSQL; on SQLite its transaction, each leg's update and its postings.
# The profile-level spend rules are read in a statement of their own (D22, decision 0052).
MOST = {"postgresql": 11, "sqlite": 19}


async def test_a_debit_purchase_costs_a_bounded_number_of_round_trips(
    client, programme, container: Container
) -> None:
    p = await programme()
    ident = await verified(client, p)
    card, _ = await debit(client, p, ident, 10_000, [limit(5000, "DAILY"), limit(9000)])
    # The first creates the programme's card system accounts, the second finds them committed.
    for _ in range(2):
        assert (await purchase(client, p, card["id"], 100))["code"] == "APPROVED"
    with counting(container) as trips:
        assert (await purchase(client, p, card["id"], 100))["code"] == "APPROVED"
    assert trips.count <= MOST[container.db.engine.dialect.name], trips.statements
