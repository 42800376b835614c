"""The card steps of the programme clock with two real `multibank serve` processes on one
PostgreSQL database and a live webhook receiver (D23, D24, D25): authorisation expiry after 7
days, a physical card's manufacturing steps, the expiry notice, expiry and renewal. The clock is
moved through both processes at once (each `clock/advance` catches up after its commit) and also
behind their backs (an UPDATE of the programme's clock, as another process that stopped before
its catch-up leaves it), so the card worker each process runs, and reads, find the steps due.
However many look, each step happens once: one AUTHORISATION_EXPIRY per hold, every event once.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select, update

from multibank.kernel.db import Database
from multibank.ledger.models import LedgerTransaction
from multibank.programmes.models import Programme
from multibank.webhooks.models import WebhookEvent
from tests.api.payments_support import PORTAL
from tests.api.test_card_concurrency import LIMITS, _balances, _debit_card
from tests.api.test_card_lifecycle import month_start, relogin
from tests.api.test_ledger_concurrency import fresh_database
from tests.api.test_managed_cards import create
from tests.api.test_payment_concurrency import serving
from tests.api.test_physical_cards import phys, upgrade_body
from tests.api.test_webhook_processes import hooked_programme
from tests.api.webhook_support import Receiver, receiving, signed_by
from tests.conftest import ADMIN_TOKEN, DB_KIND, Prog
from tests.factories import Identity, verified

pytestmark = pytest.mark.skipif(
    DB_KIND != "postgres", reason="several server processes share one PostgreSQL database"
)
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
DAY = 86_400
EACH = 5  # cards of each kind per way the clock moves
FUNDS, HELD = 1_000, 300
AUTHORISATIONS = "/hooks/managed_cards/authorisations/watch"
UPGRADES = "/hooks/managed_cards/physical_cards_upgrade/watch"
EXPIRIES = "/hooks/managed_cards/expiries/watch"
STATE_CHANGE = "/hooks/managed_cards/state_change/watch"


def _sim(p: Prog) -> dict[str, str]:
    return {"programme-key": p.api_key}


async def _advance_at_once(clients: list[httpx.AsyncClient], p: Prog, seconds: int) -> None:
    """`seconds` on the programme clock, half through each process at the same moment."""
    half = seconds // 2 + 1
    answers = await asyncio.gather(
        *(
            c.post("/simulate/api/clock/advance", headers=_sim(p), json={"seconds": half})
            for c in clients
        )
    )
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers]


async def _advance_behind(url: str, p: Prog, seconds: int) -> None:
    """The programme's clock moved with no catch-up: only the workers (and reads) see it."""
    db = Database(url)
    try:
        async with db.transaction() as s:
            await s.execute(
                update(Programme)
                .where(Programme.id == int(p.id))
                .values(clock_offset_ms=Programme.clock_offset_ms + seconds * 1000)
            )
    finally:
        await db.dispose()


async def _programme_now(client: httpx.AsyncClient, p: Prog) -> int:
    """The programme clock's time (ms), moved on by one second to read it."""
    r = await client.post("/simulate/api/clock/advance", headers=_sim(p), json={"seconds": 1})
    assert r.status_code == 200, r.text
    now: int = r.json()["now"]
    return now


async def _events(url: str, p: Prog) -> Counter[tuple[str, str, str]]:
    """The programme's recorded webhook events, counted by (path, resource, eventType)."""
    db = Database(url)
    try:
        async with db.transaction() as s:
            rows = (
                await s.execute(
                    select(WebhookEvent.path, WebhookEvent.resource, WebhookEvent.event_type).where(
                        WebhookEvent.programme_id == int(p.id)
                    )
                )
            ).all()
    finally:
        await db.dispose()
    # A recorded event type is named after its path: "managed_cards/expiries.CARD_EXPIRED".
    return Counter((path, res, kind.rpartition(".")[2]) for path, res, kind in rows)


async def _undelivered(url: str, p: Prog) -> list[Any]:
    db = Database(url)
    try:
        async with db.transaction() as s:
            stmt = select(
                WebhookEvent.path,
                WebhookEvent.event_type,
                WebhookEvent.state,
                WebhookEvent.attempts,
                WebhookEvent.next_attempt_at,
                WebhookEvent.last_error,
            ).where(WebhookEvent.programme_id == int(p.id), WebhookEvent.delivered_at.is_(None))
            return [tuple(row) for row in (await s.execute(stmt)).all()]
    finally:
        await db.dispose()


async def _expiries(url: str, p: Prog) -> Counter[str]:
    """AUTHORISATION_EXPIRY ledger transactions, counted by the card."""
    db = Database(url)
    try:
        async with db.transaction() as s:
            rows = (
                await s.execute(
                    select(LedgerTransaction.details).where(
                        LedgerTransaction.programme_id == int(p.id),
                        LedgerTransaction.type == "AUTHORISATION_EXPIRY",
                    )
                )
            ).scalars()
            return Counter(str(d["cardId"]) for d in rows)
    finally:
        await db.dispose()


async def _pending_authorisations(url: str, p: Prog) -> int:
    db = Database(url)
    try:
        async with db.transaction() as s:
            stmt = (
                select(func.count())
                .select_from(LedgerTransaction)
                .where(
                    LedgerTransaction.programme_id == int(p.id),
                    LedgerTransaction.type == "AUTHORISATION",
                    LedgerTransaction.state == "PENDING",
                )
            )
            return int((await s.execute(stmt)).scalar_one())
    finally:
        await db.dispose()


async def _until(what: str, done: Callable[[], Awaitable[bool]], seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while not await done():
        assert time.monotonic() < deadline, f"not within {seconds} s: {what}: {MISSING}"
        await asyncio.sleep(0.3)


MISSING: list[tuple[str, str, str]] = []  # what the last `_has` found missing, for the message


def _has(events: Counter[tuple[str, str, str]], path: str, cards: list[str], kind: str) -> bool:
    MISSING[:] = [
        (path, c, kind)
        for c in cards
        if not events[(path.removeprefix("/hooks"), f"managed_cards:{c}", kind)]
    ]
    return not MISSING


async def _authorised(client: httpx.AsyncClient, p: Prog, card: str) -> None:
    body = {"merchantName": "Shop", "transactionAmount": {"currency": "EUR", "amount": HELD}}
    r = await client.post(f"/simulate/api/cards/{card}/authorise", headers=_sim(p), json=body)
    assert r.status_code == 200 and r.json()["code"] == "APPROVED", r.text


async def _cards(
    clients: list[httpx.AsyncClient], p: Prog, ident: Identity
) -> tuple[list[tuple[str, str]], list[str]]:
    """EACH debit cards (each on its own EUR account holding FUNDS) and EACH prepaid cards,
    made through both processes."""
    debit = [await _debit_card(clients[i % 2], p, ident, FUNDS, 10**9) for i in range(EACH)]
    prepaid = [(await create(clients[i % 2], ident))["id"] for i in range(EACH)]
    return debit, prepaid


async def _hold_and_upgrade(
    clients: list[httpx.AsyncClient],
    p: Prog,
    ident: Identity,
    debit: list[tuple[str, str]],
    prepaid: list[str],
) -> None:
    """A hold of HELD on each debit card, each prepaid card upgraded to physical (REQUESTED),
    through both processes."""
    for i, (card, _) in enumerate(debit):
        await _authorised(clients[i % 2], p, card)
    for i, card in enumerate(prepaid):
        r = await phys(clients[i % 2], ident, card, "", upgrade_body())
        assert r.status_code == 200, r.text


async def test_card_steps_with_two_processes_happen_once(tmp_path):
    async with (
        fresh_database(tmp_path) as url,
        serving(url, tmp_path, 2) as servers,
        contextlib.AsyncExitStack() as stack,
    ):
        receiver: Receiver = stack.enter_context(receiving())
        clients = [
            await stack.enter_async_context(
                httpx.AsyncClient(base_url=b, timeout=60, limits=LIMITS)
            )
            for b, _ in servers
        ]
        p = await hooked_programme(clients[0], receiver.url)
        ident = await verified(clients[0], p, "corporates")
        renewing = [(await create(clients[i % 2], ident, renewalType="RENEW")) for i in range(EACH)]
        ending = [await create(clients[i % 2], ident) for i in range(EACH)]
        holds, physical = await _cards(clients, p, ident)
        more_holds, more_physical = await _cards(clients, p, ident)
        holds += more_holds
        physical += more_physical
        # Made in one month of the programme clock, every card expires in the same month.
        r = await clients[1].get("/multi/managed_cards", headers=ident.headers)
        assert r.status_code == 200 and r.json()["count"] == 6 * EACH, r.text
        expiry = ending[0]["expiryMmyy"]
        assert {c["expiryMmyy"] for c in r.json()["cards"]} == {expiry}

        # 1. Holds and manufacturing requests; the clock moved 8 days through both at once.
        await _hold_and_upgrade(clients, p, ident, holds[:EACH], physical[:EACH])
        await _advance_at_once(clients, p, 8 * DAY)
        # 2. The others; 8 more days behind the processes' backs: their workers take them.
        await relogin(clients[0], ident)
        await _hold_and_upgrade(clients, p, ident, holds[EACH:], physical[EACH:])
        await _advance_behind(url, p, 8 * DAY)
        held_cards = [c for c, _ in holds]

        async def steps_taken() -> bool:
            events = await _events(url, p)
            return (
                _has(events, AUTHORISATIONS, held_cards, "EXPIRED")
                and _has(events, UPGRADES, physical, "DISPATCHED")
                and await _pending_authorisations(url, p) == 0
            )

        await _until("every hold expired and every card dispatched", steps_taken)

        # 3. The start of the expiry month through both at once: every card's notice.
        now = await _programme_now(clients[0], p)
        await _advance_at_once(clients, p, (month_start(expiry) - now) // 1000 + DAY)
        every_card = held_cards + physical + [c["id"] for c in renewing + ending]

        async def noticed() -> bool:
            return _has(await _events(url, p), EXPIRIES, every_card, "CARD_ABOUT_TO_EXPIRE")

        await _until("every card's about-to-expire notice", noticed)

        # 4. Past the expiry month behind their backs: the workers expire and renew, while both
        # processes read the cards (a read takes a due step too).
        now = await _programme_now(clients[0], p)
        await _advance_behind(url, p, (month_start(expiry, 1) - now) // 1000 + DAY)
        await relogin(clients[0], ident)
        reads = await asyncio.gather(
            *(
                clients[i % 2].get(f"/multi/managed_cards/{c}", headers=ident.headers)
                for i, c in enumerate(every_card * 2)
            )
        )
        assert all(r.status_code == 200 for r in reads), [
            (r.status_code, r.text) for r in reads if r.status_code != 200
        ][:3]
        renewed = [c["id"] for c in renewing]
        expired = [c for c in every_card if c not in renewed]

        async def ended() -> bool:
            events = await _events(url, p)
            return _has(events, EXPIRIES, renewed, "CARD_RENEWED") and _has(
                events, EXPIRIES, expired, "CARD_EXPIRED"
            )

        await _until("every card expired or renewed", ended)

        # Everything recorded arrives, each event once.
        events = await _events(url, p)
        try:
            await asyncio.to_thread(receiver.wait_for, sum(events.values()), 150)
        except AssertionError as error:
            raise AssertionError(f"{error}; not delivered: {await _undelivered(url, p)}") from None
        await asyncio.sleep(1)  # anything sent twice would arrive now
        got = list(receiver.received)
        refs = Counter(r.call_ref for r in got)
        assert len(got) == sum(events.values()), (len(got), sum(events.values()))
        assert max(refs.values()) == 1, refs.most_common(3)
        assert all(signed_by(p.api_key, r) for r in got)
        delivered = Counter(_key(r.path, r.json) for r in got if r.path in _KINDS)
        cards = {f"managed_cards:{c}" for c in every_card}
        recorded = Counter(
            {
                (f"/hooks{path}", res, kind): n
                for (path, res, kind), n in events.items()
                if res in cards
            }
        )
        assert delivered == recorded, delivered - recorded or recorded - delivered
        # Each step once, for every card: nothing twice, nothing lost.
        assert max(recorded.values()) == 1, [k for k, n in recorded.items() if n > 1]
        expected = set()
        for c in held_cards:
            expected |= {(AUTHORISATIONS, c, "EXPIRED"), (AUTHORISATIONS, c, "AUTHORISED")}
        for c in physical:
            expected |= {
                (UPGRADES, c, s) for s in ("REQUESTED", "SENT_FOR_FULFILLMENT", "DISPATCHED")
            }
        for c in every_card:
            expected.add((EXPIRIES, c, "CARD_ABOUT_TO_EXPIRE"))
        for c in renewed:
            expected.add((EXPIRIES, c, "CARD_RENEWED"))
        for c in expired:
            expected |= {(EXPIRIES, c, "CARD_EXPIRED"), (STATE_CHANGE, c, "DESTROYED")}
        assert {(path, res.split(":")[1], kind) for path, res, kind in recorded} == expected

        # One expiry on the ledger per hold, the balances whole again, and the ledger verifies.
        assert await _expiries(url, p) == Counter({c: 1 for c in held_cards})
        await relogin(clients[1], ident)
        for card, account in holds:
            assert await _balances(clients[1], ident, account) == (FUNDS, FUNDS), card
        v = await clients[1].get(f"{PORTAL}/{p.id}/ledger/verify", headers=ADMIN)
        assert v.status_code == 200 and v.json() == {"ok": True, "violations": []}, v.text


# What identifies a delivered card event's step: the path's own kind field.
_KINDS: dict[str, Callable[[dict[str, Any]], str]] = {
    AUTHORISATIONS: lambda body: str(body["authorisationType"]),
    UPGRADES: lambda body: str(body["physicalCardDetails"]["manufacturingState"]),
    EXPIRIES: lambda body: str(body["eventType"]),
    STATE_CHANGE: lambda body: str(body["eventType"]),
}


def _key(path: str, body: dict[str, Any]) -> tuple[str, str, str]:
    return path, f"managed_cards:{body['id']['id']}", _KINDS[path](body)
