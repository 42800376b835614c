"""Scheduled transfers, sends and wire transfers on the 3.63 line (issue 43 §5, v3.63.md §5,
D40, D42, decision 0085), black-box over HTTP: `scheduledTimestamp` on create, `SCHEDULED` with
nothing held, execution on the programme clock (`clock/advance`, a read of a due one, the
simulator's `scheduled_execute`) with the create's checks run again, the bulk and single cancels
with their per-item results, the 400s and 409s, the 3.29.1 view, the events, the refused callers.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from tests.api.fees_support import ledger_ok
from tests.api.payments_support import (
    advance,
    balances,
    customer,
    entries,
    settings,
    simulate,
)
from tests.api.test_card_funding import events
from tests.api.test_outgoing_wire_transfers import body as owt_body
from tests.api.webhook_support import receiving
from tests.conftest import Prog
from tests.factories import CODE, Identity, login, open_account, sign_up

LINE = "/3.63.4/multi"
FUNDS = 100_000
AMOUNT = 5_000
FEE = 100  # a new programme's send and wire transfer fee; its transfers have none
HOUR_S = 3600


async def now_ms(client: httpx.AsyncClient, p: Prog) -> int:
    """The programme's clock, as the simulator's advance answers it (by a second)."""
    r = await client.post(
        "/simulate/api/clock/advance", headers={"programme-key": p.api_key}, json={"seconds": 1}
    )
    assert r.status_code == 200, r.text
    at: int = r.json()["now"]
    return at


async def later(client: httpx.AsyncClient, p: Prog, seconds: int, *idents: Identity) -> None:
    """The programme's clock `seconds` on; each of `idents` logs in again (a session ends after
    5 minutes of the programme's clock without a call)."""
    await advance(client, p, seconds)
    for ident in idents:
        r = await login(client, p, ident.email)
        assert r.status_code == 200, r.text
        ident.token = r.json()["token"]


def transfer(
    p: Prog, source: str, destination: str, amount: int = AMOUNT, **over: Any
) -> dict[str, Any]:
    return {
        "profileId": p.profiles["transfers"],
        "source": {"type": "managed_accounts", "id": source},
        "destination": {"type": "managed_accounts", "id": destination},
        "destinationAmount": {"currency": "EUR", "amount": amount},
        **over,
    }


def send(p: Prog, source: str, destination: str, amount: int = AMOUNT, **over: Any) -> dict:
    return {**transfer(p, source, destination, amount, **over), "profileId": p.profiles["sends"]}


async def two_accounts(client: httpx.AsyncClient, p: Prog, funds: int = FUNDS):
    ident, acc = await customer(client, p, funds=funds)
    other = (await open_account(client, ident, "EUR"))["id"]
    return ident, acc, other


async def post(
    client: httpx.AsyncClient, ident: Identity, path: str, json: Any, base: str = LINE
) -> httpx.Response:
    return await client.post(f"{base}{path}", headers=ident.headers, json=json)


async def read(
    client: httpx.AsyncClient, ident: Identity, path: str, base: str = LINE
) -> httpx.Response:
    return await client.get(f"{base}{path}", headers=ident.headers)


async def test_a_scheduled_transfer_waits_then_goes_on_the_programme_clock(
    client, programme, admin_headers
):
    p = await programme()
    ident, acc, other = await two_accounts(client, p)
    at = await now_ms(client, p) + HOUR_S * 1000
    r = await post(client, ident, "/transfers", transfer(p, acc, other, scheduledTimestamp=str(at)))
    assert r.status_code == 200, r.text
    t = r.json()
    assert (t["state"], t["scheduledTimestamp"]) == ("SCHEDULED", str(at))
    assert "executionTimestamp" not in t
    # Nothing moved, nothing held, nothing on the statement.
    assert await balances(client, ident, acc) == (FUNDS, FUNDS)
    assert [e["transactionId"]["type"] for e in await entries(client, ident, acc)] == ["DEPOSIT"]
    # 3.29.1 has no such state: it does not show the transfer.
    assert (await read(client, ident, f"/transfers/{t['id']}", "/multi")).status_code == 404
    assert (await read(client, ident, "/transfers", "/multi")).json()["count"] == 0
    listed = await client.get(
        f"{LINE}/transfers", headers=ident.headers, params={"state": "SCHEDULED"}
    )
    assert [x["id"] for x in listed.json()["transfer"]] == [t["id"]]

    await later(client, p, HOUR_S - 1, ident)
    assert (await read(client, ident, f"/transfers/{t['id']}")).json()["state"] == "SCHEDULED"
    await advance(client, p, 1)
    done = (await read(client, ident, f"/transfers/{t['id']}")).json()
    assert done["state"] == "COMPLETED"
    assert int(done["executionTimestamp"]) >= at
    assert await balances(client, ident, acc) == (FUNDS - AMOUNT,) * 2
    assert await balances(client, ident, other) == (AMOUNT, AMOUNT)
    # Now a state 3.29.1 knows: shown there too, in its own shape.
    old = (await read(client, ident, f"/transfers/{t['id']}", "/multi")).json()
    assert old["state"] == "COMPLETED" and "scheduledTimestamp" not in old
    # The executed filters.
    executed = int(done["executionTimestamp"])
    for params, expected in (
        ({"executedFrom": executed}, [t["id"]]),
        ({"executedTo": executed - 1}, []),
    ):
        r = await client.get(f"{LINE}/transfers", headers=ident.headers, params=params)
        assert [x["id"] for x in r.json()["transfer"]] == expected, params
    await ledger_ok(client, admin_headers, p)


async def test_a_bad_time_is_refused_and_makes_nothing(client, programme):
    p = await programme()
    ident, acc, other = await two_accounts(client, p)
    now = await now_ms(client, p)
    r = await post(client, ident, "/transfers", transfer(p, acc, other, scheduledTimestamp="soon"))
    assert r.status_code == 400
    assert r.json()["message"] == 'request.scheduledTimestamp: must match "^[0-9]+$"'
    year = 365 * 86_400_000
    for at in (now - 30 * 60_000, now, now + year + 60_000):
        r = await post(
            client, ident, "/transfers", transfer(p, acc, other, scheduledTimestamp=str(at))
        )
        assert (r.status_code, r.json()) == (409, {"errorCode": "SCHEDULED_TIMESTAMP_INVALID"}), at
        r = await post(client, ident, "/sends", send(p, acc, other, scheduledTimestamp=str(at)))
        assert r.json() == {"errorCode": "SCHEDULED_TIMESTAMP_INVALID"}, at
    assert (await read(client, ident, "/transfers")).json()["count"] == 0
    # 3.29.1 has no such field: it is ignored there, and the transfer goes at once.
    r = await post(
        client, ident, "/transfers", transfer(p, acc, other, scheduledTimestamp="1"), "/multi"
    )
    assert r.json()["state"] == "COMPLETED"


async def test_funds_are_checked_when_it_goes_not_before(client, programme, admin_headers):
    p = await programme()
    ident, acc, other = await two_accounts(client, p, funds=AMOUNT)
    at = str(await now_ms(client, p) + 60_000)
    first, second = [
        (
            await post(client, ident, "/transfers", transfer(p, acc, other, scheduledTimestamp=at))
        ).json()
        for _ in range(2)
    ]
    assert first["state"] == second["state"] == "SCHEDULED"  # both accepted: nothing is held
    # The simulator runs one now: it goes.
    r = await simulate(client, p, f"/transfers/{first['id']}/scheduled_execute")
    assert (r.status_code, r.json()) == (200, {"state": "SUCCESS"})
    # The other finds the money gone: it fails, and nothing moves.
    r = await simulate(client, p, f"/transfers/{second['id']}/scheduled_execute")
    assert (r.status_code, r.json()) == (200, {"state": "ERROR", "errorCode": "FUNDS_INSUFFICIENT"})
    failed = (await read(client, ident, f"/transfers/{second['id']}")).json()
    assert failed["state"] == "FAILED" and "executionTimestamp" in failed
    assert await balances(client, ident, acc) == (0, 0)
    # Not scheduled any more, or not a payment of that kind: the simulator says so.
    r = await simulate(client, p, f"/transfers/{first['id']}/scheduled_execute")
    assert (r.status_code, r.json()) == (409, {"errorCode": "TRANSACTION_NOT_SCHEDULED"})
    assert (await simulate(client, p, f"/sends/{first['id']}/scheduled_execute")).status_code == 404
    assert (await simulate(client, p, "/transfers/123/scheduled_execute")).status_code == 404
    # The programme's clock passing its time changes nothing more.
    await advance(client, p, 120)
    assert await balances(client, ident, acc) == (0, 0)
    await ledger_ok(client, admin_headers, p)


async def test_a_read_of_a_due_payment_lets_it_go_first(client, programme):
    """D40: a read of a payment whose time has come executes it first (the workers would
    within their next tick); here the time comes by the clock's own passing."""
    p = await programme()
    ident, acc, other = await two_accounts(client, p)
    at = await now_ms(client, p) + 1_000
    r = await post(client, ident, "/transfers", transfer(p, acc, other, scheduledTimestamp=str(at)))
    assert r.json()["state"] == "SCHEDULED"
    await asyncio.sleep(1.05)
    assert (await read(client, ident, f"/transfers/{r.json()['id']}")).json()[
        "state"
    ] == "COMPLETED"
    assert await balances(client, ident, other) == (AMOUNT, AMOUNT)


async def test_a_scheduled_send_passes_sca_first_and_holds_nothing(
    client, programme, admin_headers
):
    p = await programme()
    ident, acc = await customer(client, p, funds=FUNDS)
    payee, theirs = await customer(client, p, sms=False)
    at = await now_ms(client, p) + 30 * 60_000
    r = await post(client, ident, "/sends", send(p, acc, theirs, scheduledTimestamp=str(at)))
    assert r.status_code == 200, r.text
    s = r.json()
    assert s["state"] == "PENDING"
    assert await balances(client, ident, acc) == (FUNDS, FUNDS)  # nothing held
    otp = f"{LINE}/sends/{s['id']}/challenges/otp/SMS"
    assert (await client.post(otp, headers=ident.headers)).status_code == 204
    r = await client.post(f"{otp}/verify", headers=ident.headers, json={"verificationCode": CODE})
    assert r.status_code == 204, r.text
    assert (await read(client, ident, f"/sends/{s['id']}")).json()["state"] == "SCHEDULED"
    assert await balances(client, ident, acc) == (FUNDS, FUNDS)
    await later(client, p, 30 * 60, ident, payee)
    assert (await read(client, ident, f"/sends/{s['id']}")).json()["state"] == "COMPLETED"
    assert await balances(client, payee, theirs) == (AMOUNT, AMOUNT)
    # Within the low-value exemption: scheduled at once, with its exemption.
    r = await post(
        client,
        ident,
        "/sends",
        send(p, acc, theirs, 20, scheduledTimestamp=str(at + HOUR_S * 1000)),
    )
    assert (r.json()["state"], r.json()["challengeExemptionReason"]) == ("SCHEDULED", "LOW_VALUE")
    await ledger_ok(client, admin_headers, p)


async def test_a_scheduled_wire_transfer_from_an_empty_account(client, programme, admin_headers):
    """Accepted with no funds (nothing is checked or held before its time); it fails when it
    goes still without them, and goes when they arrived meanwhile."""
    p = await programme()
    await settings(client, admin_headers, p, owtScaRequired=False, owtProcessingDelaySeconds=1)
    ident, acc = await customer(client, p)
    at = await now_ms(client, p) + 60_000
    r = await post(
        client, ident, "/outgoing_wire_transfers", owt_body(p, acc, scheduledTimestamp=str(at))
    )
    assert r.status_code == 200, r.text
    owt = r.json()
    assert (owt["state"], owt["scheduledTimestamp"]) == ("SCHEDULED", str(at))
    assert (
        await read(client, ident, f"/outgoing_wire_transfers/{owt['id']}", "/multi")
    ).status_code == 404
    await advance(client, p, 60)
    failed = (await read(client, ident, f"/outgoing_wire_transfers/{owt['id']}")).json()
    assert failed["state"] == "FAILED" and "executionTimestamp" in failed
    assert await balances(client, ident, acc) == (0, 0)

    r = await post(
        client,
        ident,
        "/outgoing_wire_transfers",
        owt_body(p, acc, scheduledTimestamp=str(at + 60_000)),
    )
    funded = r.json()["id"]
    r = await client.post(
        f"/simulate/api/accounts/{acc}/deposit",
        headers={"programme-key": p.api_key},
        json={"depositAmount": {"currency": "EUR", "amount": FUNDS}},
    )
    assert r.status_code == 200, r.text
    await advance(client, p, 60)
    assert (await read(client, ident, f"/outgoing_wire_transfers/{funded}")).json()["state"] in (
        "SUBMITTED",
        "APPROVED",
    )
    await advance(client, p, 2)
    done = (await read(client, ident, f"/outgoing_wire_transfers/{funded}")).json()
    assert done["state"] == "COMPLETED" and "executionTimestamp" in done
    assert await balances(client, ident, acc) == (FUNDS - AMOUNT - FEE,) * 2
    await ledger_ok(client, admin_headers, p)


async def test_a_scheduled_gbp_wire_transfer_is_confirmed_then_scheduled(client, programme):
    p = await programme()
    ident, acc = await customer(client, p, funds=FUNDS, currency="GBP")
    at = await now_ms(client, p) + 60_000
    json = owt_body(
        p,
        acc,
        currency="GBP",
        details={"accountNumber": "12345678", "sortCode": "400400"},
        description="Rent",
        scheduledTimestamp=str(at),
    )
    owt = (await post(client, ident, "/outgoing_wire_transfers", json)).json()
    assert owt["state"] == "PENDING_CONFIRMATION"
    assert await balances(client, ident, acc) == (FUNDS, FUNDS)  # nothing held
    path = f"{LINE}/outgoing_wire_transfers/{owt['id']}"
    assert (await client.post(f"{path}/confirm", headers=ident.headers)).json()["state"] == (
        "PENDING_CHALLENGE"
    )
    otp = f"{path}/challenges/otp/SMS"
    assert (await client.post(otp, headers=ident.headers)).status_code == 204
    r = await client.post(f"{otp}/verify", headers=ident.headers, json={"verificationCode": CODE})
    assert r.status_code == 204, r.text
    assert (await client.get(path, headers=ident.headers)).json()["state"] == "SCHEDULED"
    # Cancelled before its time, with a reason: it never goes.
    r = await client.post(
        f"{path}/cancel", headers=ident.headers, json={"cancellationReason": "not now"}
    )
    assert (r.json()["state"], r.json()["cancellationReason"]) == ("CANCELLED", "not now")
    assert "executionTimestamp" not in r.json()
    await advance(client, p, 120)
    assert (await client.get(path, headers=ident.headers)).json()["state"] == "CANCELLED"
    assert await balances(client, ident, acc) == (FUNDS, FUNDS)


async def test_the_bulk_cancels_answer_each_item(client, programme, admin_headers):
    p = await programme()
    await settings(client, admin_headers, p, sendsScaRequired=False, owtScaRequired=False)
    ident, acc, other = await two_accounts(client, p)
    _payee, theirs = await customer(client, p, sms=False)
    stranger, strangers = await customer(client, p, funds=FUNDS, sms=False)
    at = str(await now_ms(client, p) + HOUR_S * 1000)
    scheduled = [
        (
            await post(client, ident, "/transfers", transfer(p, acc, other, scheduledTimestamp=at))
        ).json()["id"]
        for _ in range(2)
    ]
    now = (await post(client, ident, "/transfers", transfer(p, acc, other))).json()["id"]
    theirs_scheduled = (
        await post(
            client,
            stranger,
            "/transfers",
            transfer(
                p,
                strangers,
                (await open_account(client, stranger, "EUR"))["id"],
                scheduledTimestamp=at,
            ),
        )
    ).json()["id"]
    r = await post(
        client,
        ident,
        "/transfers/bulk/cancel",
        {
            "cancellations": [
                {"id": scheduled[0], "cancellationReason": "changed my mind"},
                {"id": now},
                {"id": "999999"},
                {"id": theirs_scheduled},
                {"id": scheduled[1]},
                {"id": scheduled[0]},
            ]
        },
    )
    assert r.status_code == 200, r.text
    assert r.json() == {
        "cancellations": [
            {"id": scheduled[0], "state": "SUCCESS"},
            {"id": now, "state": "ERROR", "errorCode": "TRANSACTION_NOT_SCHEDULED"},
            {"id": "999999", "state": "ERROR", "errorCode": "NOT_FOUND"},
            {"id": theirs_scheduled, "state": "ERROR", "errorCode": "NOT_FOUND"},
            {"id": scheduled[1], "state": "SUCCESS"},
            {"id": scheduled[0], "state": "ERROR", "errorCode": "TRANSACTION_NOT_SCHEDULED"},
        ]
    }
    first = (await read(client, ident, f"/transfers/{scheduled[0]}")).json()
    assert (first["state"], first["cancellationReason"]) == ("CANCELLED", "changed my mind")
    # The stranger's is untouched and goes at its time.
    await later(client, p, HOUR_S, ident, stranger)
    assert (await read(client, stranger, f"/transfers/{theirs_scheduled}")).json()[
        "state"
    ] == "COMPLETED"
    assert (await read(client, ident, f"/transfers/{scheduled[1]}")).json()["state"] == "CANCELLED"
    assert await balances(client, ident, acc) == (FUNDS - AMOUNT,) * 2  # `now` alone
    # Sends and (deprecated) wire transfers have their own, alike.
    s = (
        await post(
            client,
            ident,
            "/sends",
            send(p, acc, theirs, scheduledTimestamp=str(int(at) + HOUR_S * 1000)),
        )
    ).json()
    assert s["state"] == "SCHEDULED"
    r = await post(client, ident, "/sends/bulk/cancel", {"cancellations": [{"id": s["id"]}]})
    assert r.json() == {"cancellations": [{"id": s["id"], "state": "SUCCESS"}]}
    o = (
        await post(
            client,
            ident,
            "/outgoing_wire_transfers",
            owt_body(p, acc, scheduledTimestamp=str(int(at) + HOUR_S * 1000)),
        )
    ).json()
    assert o["state"] == "SCHEDULED"
    # A transfer's id is no send's: each kind cancels its own.
    r = await post(client, ident, "/sends/bulk/cancel", {"cancellations": [{"id": o["id"]}]})
    assert r.json()["cancellations"][0]["errorCode"] == "NOT_FOUND"
    r = await post(
        client, ident, "/outgoing_wire_transfers/bulk/cancel", {"cancellations": [{"id": o["id"]}]}
    )
    assert r.json() == {"cancellations": [{"id": o["id"], "state": "SUCCESS"}]}
    await ledger_ok(client, admin_headers, p)


async def test_a_bad_bulk_cancel_is_400_and_cancels_nothing(client, programme):
    p = await programme()
    ident, acc, other = await two_accounts(client, p)
    at = str(await now_ms(client, p) + HOUR_S * 1000)
    t = (
        await post(client, ident, "/transfers", transfer(p, acc, other, scheduledTimestamp=at))
    ).json()["id"]
    path = "/transfers/bulk/cancel"
    r = await post(client, ident, path, {"cancellations": [{"id": t, "cancellationReason": "no!"}]})
    assert r.status_code == 400
    assert r.json()["message"] == (
        'request.cancellations[0].cancellationReason: must match "^[ a-zA-Z0-9_-]+$"'
    )
    assert r.json()["syntaxErrors"]["invalidFields"][0]["fieldName"] == (
        "cancellations[0].cancellationReason"
    )
    for bad in (
        {"cancellations": [{"id": t, "cancellationReason": "x" * 51}]},
        {"cancellations": [{"cancellationReason": "x"}]},
        {"cancellations": [{"id": "abc"}]},
        {"cancellations": [{"id": t}, None]},
        {"cancellations": []},
        {"cancellations": [{"id": t}] * 101},
        {},
    ):
        r = await post(client, ident, path, bad)
        assert r.status_code == 400, (bad, r.text)
    assert (await read(client, ident, f"/transfers/{t}")).json()["state"] == "SCHEDULED"


async def test_the_cancels_refuse_every_caller_but_the_owner(client, programme):
    p, other = await programme(), await programme()
    ident = await sign_up(client, p, base=LINE)
    for path in (
        "/transfers/bulk/cancel",
        "/sends/bulk/cancel",
        "/outgoing_wire_transfers/bulk/cancel",
    ):
        url = f"{LINE}{path}"
        json = {"cancellations": [{"id": "1"}]}
        r = await client.post(
            url, headers={"Authorization": ident.headers["Authorization"]}, json=json
        )
        assert r.status_code == 400
        assert r.json()["syntaxErrors"]["invalidFields"][0]["fieldName"] == "api-key"
        r = await client.post(url, headers={**ident.headers, "api-key": "mb_sbx_nope"}, json=json)
        assert r.status_code == 401
        r = await client.post(url, headers={**ident.headers, "api-key": other.api_key}, json=json)
        assert r.status_code == 403
        assert (await client.post(url, headers=p.headers, json=json)).status_code == 401
        for base in ("/multi", "/3.29.1/multi", "/3.1.0/multi"):
            r = await client.post(f"{base}{path}", headers=ident.headers, json=json)
            assert r.status_code == 404, (base, path)


async def test_the_events_of_a_scheduled_payment(client, programme, admin_headers):
    with receiving() as receiver:
        p = await programme()
        await settings(client, admin_headers, p, webhookUrl=receiver.url, sendsScaRequired=False)
        ident, acc, other = await two_accounts(client, p)
        _payee, theirs = await customer(client, p, sms=False)
        at = await now_ms(client, p) + 60_000
        t = (
            await post(
                client, ident, "/transfers", transfer(p, acc, other, scheduledTimestamp=str(at))
            )
        ).json()
        s = (
            await post(client, ident, "/sends", send(p, acc, theirs, scheduledTimestamp=str(at)))
        ).json()
        r = await post(
            client,
            ident,
            "/sends/bulk/cancel",
            {"cancellations": [{"id": s["id"], "cancellationReason": "oops"}]},
        )
        assert r.json()["cancellations"][0]["state"] == "SUCCESS"
        await advance(client, p, 60)
        transfers = [
            e
            for e in await events(client, admin_headers, p, "transfers")
            if e["transfer"]["id"]["id"] == t["id"]
        ]
        sends = [
            e
            for e in await events(client, admin_headers, p, "send")
            if e["send"]["id"]["id"] == s["id"]
        ]
    transfers.reverse()  # the deliveries come newest first
    sends.reverse()
    assert [e["eventType"] for e in transfers] == ["SCHEDULED", "COMPLETED"]
    assert transfers[0]["transfer"]["scheduledTimestamp"] == str(at)
    assert int(transfers[1]["transfer"]["executionTimestamp"]) >= at
    assert [e["eventType"] for e in sends] == ["SCHEDULED", "CANCELLED"]
    assert sends[1]["send"]["cancellationReason"] == "oops"
    assert sends[1]["send"]["state"] == "CANCELLED"
