"""The delivery rounds (webhooks/delivery.py, decision 0062) as a server process's worker runs
them, on the database under test: each resource's events go in the order written, the next as
soon as the one before is delivered, in the same round; a resource's chain stops at its first
failure and its later events wait for it; a round finds its work among pending events only,
through the partial indexes, whatever the history."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import select, text

from multibank.container import Container
from multibank.webhooks.delivery import CHAIN, HEADS, claim_queries, retry_delay_ms
from multibank.webhooks.models import DELIVERED, PENDING, WebhookEvent
from tests.api.webhook_support import Received
from tests.webhooks.conftest import Hooked


async def _states(hooked: Hooked) -> dict[tuple[str, int], WebhookEvent]:
    async with hooked.container.db.transaction() as s:
        events = (
            await s.scalars(
                select(WebhookEvent).where(WebhookEvent.programme_id == hooked.programme.id)
            )
        ).all()
    return {(e.resource.removeprefix("tests:"), json.loads(e.payload)["seq"]): e for e in events}


async def test_many_events_of_each_resource_arrive_in_order_a_chain_a_round(
    hooked: Hooked,
) -> None:
    resources, per_resource = 5, 2 * CHAIN + 5
    await hooked.write(resources, per_resource)
    await hooked.round()
    # One round: the first CHAIN events of every resource, each sent once the one before it
    # was delivered.
    assert hooked.arrived() == {f"r{r}": list(range(CHAIN)) for r in range(resources)}
    for _ in range(3):
        await hooked.round()
    assert hooked.arrived() == {f"r{r}": list(range(per_resource)) for r in range(resources)}
    refs = [got.call_ref for got in hooked.receiver.received]
    assert len(refs) == len(set(refs)) == resources * per_resource
    states = await _states(hooked)
    assert {e.state for e in states.values()} == {DELIVERED}
    assert {(e.attempts, e.lease_until) for e in states.values()} == {(1, None)}


async def test_a_chain_stops_at_its_first_failure_and_the_later_events_wait(
    hooked: Hooked,
) -> None:
    failed: list[Received] = []

    def answer(got: Received) -> tuple[int, bytes, dict[str, str]]:
        if got.json == {"resource": "r0", "seq": 2} and not failed:
            failed.append(got)
            return 503, b"busy", {}
        return 204, b"", {}

    hooked.receiver.answer_for = answer
    await hooked.write(2, 6)
    await hooked.round()
    assert hooked.arrived() == {"r0": [0, 1, 2], "r1": [0, 1, 2, 3, 4, 5]}
    states = await _states(hooked)
    retried = states[("r0", 2)]
    assert (retried.state, retried.attempts, retried.lease_until) == (PENDING, 1, None)
    assert retried.next_attempt_at == (
        failed and int(failed[0].headers["published-timestamp"]) + retry_delay_ms(1)
    )
    waiting = [states[("r0", seq)] for seq in (3, 4, 5)]
    # Not sent, and their leases given back: they go after event 2, whoever sends it.
    assert {(e.state, e.attempts, e.lease_until) for e in waiting} == {(PENDING, 0, None)}
    await hooked.round()
    assert hooked.arrived()["r0"] == [0, 1, 2]  # event 2 is not due yet, nor those after it
    await hooked.advance(retry_delay_ms(1))
    await hooked.round()
    assert hooked.arrived()["r0"] == [0, 1, 2, 2, 3, 4, 5]
    assert {e.state for e in (await _states(hooked)).values()} == {DELIVERED}


async def test_a_round_chains_no_further_than_half_its_lease_allows(hooked: Hooked) -> None:
    await hooked.write(3, 4)
    # With a 20 s lease the sends of a round must end within 10 s, the timeout of one send:
    # each resource's head only, as a round always sent.
    await hooked.round(lease_ms=20_000)
    assert hooked.arrived() == {"r0": [0], "r1": [0], "r2": [0]}
    await hooked.round()
    assert hooked.arrived() == {f"r{r}": [0, 1, 2, 3] for r in range(3)}


def _index_names(plan: Any) -> set[str]:
    """The names of the indexes a PostgreSQL JSON plan uses, at any depth."""
    if isinstance(plan, list):
        return set().union(*(_index_names(p) for p in plan)) if plan else set()
    if not isinstance(plan, dict):
        return set()
    found = {plan["Index Name"]} if "Index Name" in plan else set()
    return found.union(*(_index_names(v) for v in plan.values()))


async def test_the_claim_reads_pending_events_only_whatever_the_history(
    hooked: Hooked, container: Container
) -> None:
    # A long history for every resource, a few events pending: the statistics then tell the
    # planner what a server that has run for a while has.
    await hooked.write(5, 400, state=DELIVERED)
    await hooked.write(5, 2)
    _, query = claim_queries(HEADS, CHAIN, container.db.is_sqlite)
    async with container.db.transaction() as s:
        dialect = s.get_bind().dialect
        sql = str(
            query.params(server_now=container.clock.system_ms()).compile(
                dialect=dialect, compile_kwargs={"literal_binds": True}
            )
        )
        if container.db.is_sqlite:
            await s.execute(text("ANALYZE webhook_events"))
            plan = (await s.execute(text(f"EXPLAIN QUERY PLAN {sql}"))).all()
            steps = [row[-1] for row in plan]
            walk = [d for d in steps if d.startswith("SCAN e") or d.startswith("SCAN webhook")]
            assert any("ix_webhook_events_pending " in f"{d} " for d in steps), steps
            assert not walk or all("ix_webhook_events_pending" in d for d in walk), steps
            probes = [d for d in steps if "webhook_events_" in d and "SEARCH" in d]
            assert probes and all("ix_webhook_events_pending" in d for d in probes), steps
            used = " ".join(steps)
        else:
            await s.execute(text("ANALYZE webhook_events"))
            plan = (await s.execute(text(f"EXPLAIN (FORMAT JSON) {sql}"))).scalar_one()
            used = " ".join(sorted(_index_names(plan)))
            assert "ix_webhook_events_pending" in used.split(), plan
            assert "ix_webhook_events_pending_resource" in used.split(), plan
    # Never an index that holds delivered events: the history is not read.
    for whole in ("pk_webhook_events", "ix_webhook_events_resource", "ix_webhook_events_programme"):
        assert whole not in used.split(), used
