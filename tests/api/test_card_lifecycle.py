"""Card expiry and renewal on the programme clock (D24, D27) and the simulator's expire, about
to expire and renew (D26, cards.md §6.2), black-box over HTTP: the clock is moved with the
simulator's `clock/advance`, the events are received by a live webhook receiver."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx
from sqlalchemy import update

from multibank.cards import lifecycle
from multibank.programmes import due
from multibank.programmes.models import Programme
from tests.api.test_managed_cards import LATEST, V3291, create, get
from tests.api.test_webhooks import deliver, hooked  # noqa: F401 (the fixture)
from tests.api.webhook_support import Receiver, signed_by
from tests.conftest import Prog
from tests.factories import Identity, login, verified

SIM = "/simulate/api"
EXPIRIES = "/hooks/managed_cards/expiries/watch"
STATE_CHANGE = "/hooks/managed_cards/state_change/watch"
DAY = 86400


def month_start(mmyy: str, months_on: int = 0) -> int:
    """Epoch ms of the first instant (UTC) of the month `months_on` after MMYY (20YY)."""
    index = (2000 + int(mmyy[2:])) * 12 + int(mmyy[:2]) - 1 + months_on
    return int(datetime(index // 12, index % 12 + 1, 1, tzinfo=UTC).timestamp() * 1000)


def mmyy_plus(mmyy: str, months: int) -> str:
    index = int(mmyy[2:]) * 12 + int(mmyy[:2]) - 1 + months
    return f"{index % 12 + 1:02d}{(index // 12) % 100:02d}"


async def advance(client: httpx.AsyncClient, p: Prog, seconds: int) -> int:
    """Moves the programme's clock; answers its new time (ms)."""
    r = await client.post(
        f"{SIM}/clock/advance", headers={"programme-key": p.api_key}, json={"seconds": seconds}
    )
    assert r.status_code == 200, r.text
    now: int = r.json()["now"]
    return now


async def advance_to(client: httpx.AsyncClient, p: Prog, target_ms: int) -> int:
    """Moves the programme's clock to just past `target_ms` (in steps of at most 10 years)."""
    now = await advance(client, p, 1)
    while now <= target_ms:
        now = await advance(client, p, min((target_ms - now) // 1000 + 60, 10 * 365 * DAY))
    return now


async def relogin(client: httpx.AsyncClient, ident: Identity) -> None:
    """Years on the clock end every session: a fresh one."""
    r = await login(client, ident.p, ident.email)
    assert r.status_code == 200, r.text
    ident.token = r.json()["token"]


def events_of(receiver: Receiver, path: str, card_id: str) -> list[dict[str, Any]]:
    return [r.json for r in receiver.of(path) if r.json["id"]["id"] == card_id]


async def sim(client: httpx.AsyncClient, p: Prog, card_id: str, action: str) -> httpx.Response:
    return await client.post(
        f"{SIM}/cards/{card_id}/{action}", headers={"programme-key": p.api_key}
    )


async def test_a_no_renew_card_is_told_once_then_expires_with_its_month(
    client,
    container,
    hooked,  # noqa: F811
):
    p, receiver = hooked
    ident = await verified(client, p, "corporates")
    card = await create(client, ident)
    other = await create(client, ident, renewalType="RENEW")
    expiry = card["expiryMmyy"]

    # One month before the end of the expiry month (its first day): the notice, once.
    await advance_to(client, p, month_start(expiry) + DAY * 1000)
    await deliver(container)
    notices = events_of(receiver, EXPIRIES, card["id"])
    assert [e["eventType"] for e in notices] == ["CARD_ABOUT_TO_EXPIRE"]
    assert notices[0]["state"] == {"state": "ACTIVE"} and notices[0]["expiryMmyy"] == expiry
    assert notices[0]["cardType"] == "VIRTUAL" and notices[0]["renewalType"] == "NO_RENEW"
    assert [e["eventType"] for e in events_of(receiver, EXPIRIES, other["id"])] == [
        "CARD_ABOUT_TO_EXPIRE"
    ]
    await advance(client, p, 7 * DAY)  # later in the month: no second notice
    await relogin(client, ident)
    assert (await get(client, ident, card["id"]))["state"] == {"state": "ACTIVE"}
    await deliver(container)
    assert len(events_of(receiver, EXPIRIES, card["id"])) == 1

    # Past the end of the expiry month: destroyed, reason EXPIRED, and both events.
    await advance_to(client, p, month_start(expiry, 1))
    await deliver(container)
    assert [e["eventType"] for e in events_of(receiver, EXPIRIES, card["id"])] == [
        "CARD_ABOUT_TO_EXPIRE",
        "CARD_EXPIRED",
    ]
    expired = events_of(receiver, EXPIRIES, card["id"])[1]
    assert expired["state"] == {"state": "DESTROYED", "destroyedReason": "EXPIRED"}
    changes = events_of(receiver, STATE_CHANGE, card["id"])
    assert [(e["eventType"], e["state"]) for e in changes] == [
        ("DESTROYED", {"state": "DESTROYED", "destroyedReason": "EXPIRED"})
    ]
    assert all(signed_by(p.api_key, r) for r in receiver.of(EXPIRIES))
    await relogin(client, ident)
    for base in (LATEST, V3291):
        read = await get(client, ident, card["id"], base)
        assert read["state"] == {"state": "DESTROYED", "destroyedReason": "EXPIRED"}
        assert read["expiryMmyy"] == expiry
    r = await client.get(
        f"{LATEST}/managed_cards",
        headers=ident.headers,
        params=[("state", "DESTROYED"), ("state.destroyedReason", "EXPIRED")],
    )
    assert [c["id"] for c in r.json()["cards"]] == [card["id"]]
    # A destroyed card takes no further step: nothing more is sent a period later.
    await advance(client, p, 3 * 365 * DAY)
    await deliver(container)
    assert len(events_of(receiver, EXPIRIES, card["id"])) == 2
    assert len(events_of(receiver, STATE_CHANGE, card["id"])) == 1


async def test_a_renewing_card_keeps_its_number_and_gets_a_new_expiry_and_cvv(
    client,
    container,
    hooked,  # noqa: F811
):
    p, receiver = hooked
    ident = await verified(client, p, "consumers")
    card = await create(client, ident, renewalType="AUTO_RENEW")
    expiry = card["expiryMmyy"]
    await advance_to(client, p, month_start(expiry, 1))
    await relogin(client, ident)
    renewed = await get(client, ident, card["id"])
    assert renewed["state"] == {"state": "ACTIVE"}
    assert renewed["expiryMmyy"] == mmyy_plus(expiry, 36)
    assert renewed["startMmyy"] == expiry  # reissued in its expiry month
    assert renewed["renewalType"] == "AUTO_RENEW"
    assert renewed["cardNumber"] == card["cardNumber"]
    assert renewed["cardNumberLastFour"] == card["cardNumberLastFour"]
    assert renewed["cvv"] != card["cvv"]
    assert renewed["id"] == card["id"] and renewed["balances"] == card["balances"]
    await deliver(container)
    # The clock jumped over the notice's month: no late notice, the renewal says more.
    kinds = [e["eventType"] for e in events_of(receiver, EXPIRIES, card["id"])]
    assert kinds == ["CARD_RENEWED"]
    event = events_of(receiver, EXPIRIES, card["id"])[0]
    assert event["expiryMmyy"] == renewed["expiryMmyy"] and event["state"] == {"state": "ACTIVE"}
    assert event["renewalType"] == "AUTO_RENEW" and event["renewalTimestamp"].isdigit()
    assert events_of(receiver, STATE_CHANGE, card["id"]) == []
    # The list answers the renewed card too.
    r = await client.get(f"{LATEST}/managed_cards", headers=ident.headers)
    assert r.json()["cards"] == [renewed]


async def test_a_clock_moved_over_several_periods_renews_once_per_period(client, programme):
    p = await programme()
    ident = await verified(client, p, "corporates")
    card = await create(client, ident, renewalType="RENEW")
    now = await advance(client, p, 10 * 365 * DAY)
    expected = card["expiryMmyy"]
    while month_start(expected, 1) <= now:
        expected = mmyy_plus(expected, 36)
    await relogin(client, ident)
    renewed = await get(client, ident, card["id"])
    assert renewed["expiryMmyy"] == expected != card["expiryMmyy"]
    assert renewed["state"] == {"state": "ACTIVE"} and renewed["cvv"] != card["cvv"]


async def test_a_blocked_renewing_card_is_renewed_and_stays_blocked(client, programme):
    p = await programme()
    ident = await verified(client, p, "corporates")
    card = await create(client, ident, renewalType="RENEW")
    r = await client.post(f"{LATEST}/managed_cards/{card['id']}/block", headers=ident.headers)
    assert r.status_code == 204
    await advance_to(client, p, month_start(card["expiryMmyy"], 1))
    await relogin(client, ident)
    renewed = await get(client, ident, card["id"])
    assert renewed["state"] == {"state": "BLOCKED", "blockedReason": "USER"}
    assert renewed["expiryMmyy"] == mmyy_plus(card["expiryMmyy"], 36)


async def test_the_simulator_expires_announces_and_renews_cards(
    client,
    container,
    hooked,  # noqa: F811
):
    p, receiver = hooked
    ident = await verified(client, p, "corporates")
    plain = await create(client, ident)
    renewing = await create(client, ident, renewalType="RENEW")

    assert (await sim(client, p, plain["id"], "about_to_expire")).status_code == 204
    r = await sim(client, p, renewing["id"], "expire")
    assert r.status_code == 409 and r.json()["errorCode"] == "INSTRUMENT_NOT_EXPIRABLE"
    r = await sim(client, p, plain["id"], "renew")
    assert r.status_code == 409 and r.json()["errorCode"] == "INSTRUMENT_NOT_RENEWABLE"
    assert (await sim(client, p, renewing["id"], "renew")).status_code == 204
    assert (await sim(client, p, plain["id"], "expire")).status_code == 204
    for action in ("expire", "renew", "about_to_expire"):
        r = await sim(client, p, plain["id"], action)
        assert r.status_code == 409 and r.json()["errorCode"] == "INSTRUMENT_DESTROYED", action

    read = await get(client, ident, plain["id"])
    assert read["state"] == {"state": "DESTROYED", "destroyedReason": "EXPIRED"}
    renewed = await get(client, ident, renewing["id"])
    assert renewed["state"] == {"state": "ACTIVE"}
    assert renewed["cvv"] != renewing["cvv"] and renewed["cardNumber"] == renewing["cardNumber"]
    # Renewed now: reissued this month, its expiry moved 36 months on, as the clock's renewal
    # moves it (D24); the new CVV token is of the description's length (D21a).
    assert renewed["startMmyy"] == renewing["startMmyy"]
    assert renewed["expiryMmyy"] == mmyy_plus(renewing["expiryMmyy"], 36)
    assert len(renewed["cvv"]["value"]) == 3
    # Renewed again: 36 months more.
    assert (await sim(client, p, renewing["id"], "renew")).status_code == 204
    again = await get(client, ident, renewing["id"])
    assert again["expiryMmyy"] == mmyy_plus(renewing["expiryMmyy"], 72)
    assert again["cvv"] != renewed["cvv"]
    # A removed renewing card is destroyed: not renewable.
    r = await client.post(f"{LATEST}/managed_cards/{renewing['id']}/remove", headers=ident.headers)
    assert r.status_code == 204
    r = await sim(client, p, renewing["id"], "renew")
    assert r.status_code == 409 and r.json()["errorCode"] == "INSTRUMENT_DESTROYED"

    await deliver(container)
    assert [e["eventType"] for e in events_of(receiver, EXPIRIES, plain["id"])] == [
        "CARD_ABOUT_TO_EXPIRE",
        "CARD_EXPIRED",
    ]
    assert [e["eventType"] for e in events_of(receiver, STATE_CHANGE, plain["id"])] == ["DESTROYED"]
    assert [e["eventType"] for e in events_of(receiver, EXPIRIES, renewing["id"])] == [
        "CARD_RENEWED",
        "CARD_RENEWED",
    ]


async def test_the_simulators_notice_counts_as_the_clocks(
    client,
    container,
    hooked,  # noqa: F811
):
    p, receiver = hooked
    ident = await verified(client, p, "corporates")
    card = await create(client, ident)
    assert (await sim(client, p, card["id"], "about_to_expire")).status_code == 204
    await advance_to(client, p, month_start(card["expiryMmyy"]) + DAY * 1000)
    await deliver(container)
    assert [e["eventType"] for e in events_of(receiver, EXPIRIES, card["id"])] == [
        "CARD_ABOUT_TO_EXPIRE"
    ]


async def test_the_simulator_refuses_callers_and_cards_it_does_not_know(client, programme):
    p = await programme()
    other = await programme()
    ident = await verified(client, p, "corporates")
    card = await create(client, ident)
    for action in ("expire", "about_to_expire", "renew"):
        url = f"{SIM}/cards/{card['id']}/{action}"
        assert (await client.post(url)).status_code == 400
        assert (await client.post(url, headers={"programme-key": "nope"})).status_code == 401
        # Another programme's card, and an unknown one, are not found; nothing changes.
        assert (await sim(client, other, card["id"], action)).status_code == 404
        assert (await sim(client, p, "1", action)).status_code == 404
        assert (await sim(client, p, str(2**64), action)).status_code == 404
    assert await get(client, ident, card["id"]) == card
    live = await programme(mode="live")
    assert (await sim(client, live, card["id"], "expire")).status_code == 404


async def test_a_read_answers_the_card_as_the_clock_has_it(client, container, programme):
    """A clock moved on without its steps taken (another process moved it and stopped before
    its catch-up; no background worker runs here): the next read takes them."""
    p = await programme()
    ident = await verified(client, p, "corporates")
    card = await create(client, ident)
    renewing = await create(client, ident, renewalType="RENEW")
    ends = month_start(card["expiryMmyy"], 1)
    async with container.db.transaction() as session:
        await session.execute(
            update(Programme)
            .where(Programme.id == int(p.id))
            .values(clock_offset_ms=ends - container.clock.system_ms() + DAY * 1000)
        )
    await relogin(client, ident)
    read = await get(client, ident, card["id"])
    assert read["state"] == {"state": "DESTROYED", "destroyedReason": "EXPIRED"}
    r = await client.get(f"{LATEST}/managed_cards", headers=ident.headers)
    listed = {c["id"]: c for c in r.json()["cards"]}
    assert listed[card["id"]] == read
    assert listed[renewing["id"]]["expiryMmyy"] == mmyy_plus(renewing["expiryMmyy"], 36)
    assert listed[renewing["id"]]["cvv"] != renewing["cvv"]


async def test_the_background_round_takes_due_cards_without_a_read(
    client,
    container,
    hooked,  # noqa: F811
):
    """The worker every server process runs (its round, called here: the test server runs no
    background loop): a clock moved on without its steps taken is caught up, events included."""
    p, receiver = hooked
    ident = await verified(client, p, "corporates")
    card = await create(client, ident)
    async with container.db.transaction() as session:
        await session.execute(
            update(Programme)
            .where(Programme.id == int(p.id))
            .values(
                clock_offset_ms=month_start(card["expiryMmyy"], 1)
                - container.clock.system_ms()
                + DAY * 1000
            )
        )
    while await due.run_due(container.db, container.clock, [lifecycle.DUE]):
        pass  # a full batch: maybe more is due
    await deliver(container)
    assert [e["eventType"] for e in events_of(receiver, EXPIRIES, card["id"])] == ["CARD_EXPIRED"]
    assert [e["eventType"] for e in events_of(receiver, STATE_CHANGE, card["id"])] == ["DESTROYED"]
    # Nothing is left due for it: another round sends nothing more.
    await due.run_due(container.db, container.clock, [lifecycle.DUE])
    await deliver(container)
    assert len(events_of(receiver, EXPIRIES, card["id"])) == 1
