"""Webhooks (issue 13, D16; money-movement.md §2): signed events recorded with their change and
delivered after it, retried, logged, redelivered, refused where they must not go.

A real HTTP receiver on 127.0.0.1 (tests/api/webhook_support.py) gets the events; signatures
are checked there with HMAC computed in the test. Delivery rounds are driven here
(`deliver_due`), as each server process's worker runs them; the tests with server processes are
in test_webhook_processes.py.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from sqlalchemy import update

from multibank.webhooks.delivery import deliver_due, retry_delay_ms
from multibank.webhooks.models import PENDING, WebhookEvent
from tests.api.payments_support import advance, customer, enrol_sms, settings
from tests.api.webhook_support import Receiver, receiving, signed_by
from tests.conftest import Prog
from tests.factories import CODE, Identity, deposit, login, open_account, verified

PORTAL = "/portal/api/programmes"


async def deliver(container: Any, rounds: int = 30, **kw: Any) -> None:
    """Delivery rounds until nothing is due."""
    async with httpx.AsyncClient(timeout=10, follow_redirects=False) as http:
        for _ in range(rounds):
            if await deliver_due(container.db, container.clock, http, **kw) == 0:
                return


@pytest.fixture
async def hooked(
    programme, container, admin_headers, client
) -> AsyncIterator[tuple[Prog, Receiver]]:
    """A sandbox programme whose webhook URL is a live receiver; its leftover events are ended
    afterwards, so later tests' delivery rounds do not retry them."""
    with receiving() as receiver:
        p = await programme()
        await settings(client, admin_headers, p, webhookUrl=receiver.url)
        yield p, receiver
        async with container.db.transaction() as s:
            await s.execute(
                update(WebhookEvent)
                .where(WebhookEvent.programme_id == int(p.id), WebhookEvent.state == PENDING)
                .values(state="FAILED")
            )


async def deliveries(
    client: httpx.AsyncClient, admin: dict[str, str], p: Prog, **params: Any
) -> dict[str, Any]:
    r = await client.get(f"{PORTAL}/{p.id}/webhooks/deliveries", headers=admin, params=params)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def types(received: list[Any], path: str) -> list[str]:
    out = []
    for r in received:
        if r.path == path:
            body = r.json
            out.append(body.get("eventType") or body.get("status") or body.get("type"))
    return out


async def test_every_event_type_arrives_signed_in_its_shape(
    client, container, admin_headers, hooked
):
    p, receiver = hooked
    # Access, factors, step-up
    ident = await verified(client, p, "corporates")
    r = await login(client, p, ident.email)
    assert r.status_code == 200
    assert (await login(client, p, ident.email, password="Wrong-Pass1!")).status_code == 403
    await enrol_sms(client, ident.headers)
    otp = "/multi/stepup/challenges/otp/SMS"
    assert (await client.post(otp, headers=ident.headers)).status_code == 204
    r = await client.post(f"{otp}/verify", headers=ident.headers, json={"verificationCode": CODE})
    assert r.status_code == 204
    consumer = await verified(client, p, "consumers")
    # Accounts, IBAN, deposit, fee
    acc = (await open_account(client, ident, "EUR"))["id"]
    r = await client.patch(
        f"/multi/managed_accounts/{acc}", headers=ident.headers, json={"friendlyName": "Ops"}
    )
    assert r.status_code == 200
    for step in ("block", "unblock"):
        r = await client.post(f"/multi/managed_accounts/{acc}/{step}", headers=ident.headers)
        assert r.status_code == 204
    empty = (await open_account(client, ident, "EUR"))["id"]
    r = await client.post(f"/3.1.0/multi/managed_accounts/{empty}/remove", headers=ident.headers)
    assert r.status_code == 204
    assert await deposit(client, p, acc, 100_000) == "COMPLETED"  # upgrades to an IBAN first
    r = await client.post(
        "/multi/corporates/fees/charge",
        headers=ident.headers,
        json={"feeType": "ADMIN_FEE", "source": {"type": "managed_accounts", "id": acc}},
    )
    assert r.status_code == 200
    # Payments: a transfer, a send with SCA, a wire transfer with SCA through to COMPLETED
    second = (await open_account(client, ident, "EUR"))["id"]
    theirs = (await open_account(client, consumer, "EUR"))["id"]
    money = {"currency": "EUR", "amount": 5000}
    r = await client.post(
        "/multi/transfers",
        headers=ident.headers,
        json={
            "profileId": p.profiles["transfers"],
            "source": {"type": "managed_accounts", "id": acc},
            "destination": {"type": "managed_accounts", "id": second},
            "destinationAmount": money,
        },
    )
    transfer_id = r.json()["id"]
    r = await client.post(
        "/multi/sends",
        headers=ident.headers,
        json={
            "profileId": p.profiles["sends"],
            "source": {"type": "managed_accounts", "id": acc},
            "destination": {"type": "managed_accounts", "id": theirs},
            "destinationAmount": money,
        },
    )
    send_id = r.json()["id"]
    sotp = f"/multi/sends/{send_id}/challenges/otp/SMS"
    assert (await client.post(sotp, headers=ident.headers)).status_code == 204
    r = await client.post(f"{sotp}/verify", headers=ident.headers, json={"verificationCode": CODE})
    assert r.status_code == 204
    r = await client.post(
        "/multi/outgoing_wire_transfers",
        headers=ident.headers,
        json={
            "profileId": p.profiles["outgoingWireTransfers"],
            "sourceInstrument": {"type": "managed_accounts", "id": acc},
            "transferAmount": money,
            "description": "Invoice",
            "destinationBeneficiary": {
                "name": "Ada",
                "bankAccountDetails": {
                    "iban": "DE89370400440532013000",
                    "bankIdentifierCode": "COBADEFFXXX",
                },
            },
        },
    )
    owt_id = r.json()["id"]
    wotp = f"/multi/outgoing_wire_transfers/{owt_id}/challenges/otp/SMS"
    assert (await client.post(wotp, headers=ident.headers)).status_code == 204
    r = await client.post(f"{wotp}/verify", headers=ident.headers, json={"verificationCode": CODE})
    assert r.status_code == 204
    await advance(client, p, 1)
    await advance(client, p, 2)

    await deliver(container)
    got = receiver.received
    assert all(r.headers["content-type"] == "application/json" for r in got)
    assert all(signed_by(p.api_key, r) for r in got), "a signature does not verify"
    assert len({r.call_ref for r in got}) == len(got)  # one call-ref per event
    assert all(int(r.headers["published-timestamp"]) > 0 for r in got)
    paths = Counter(r.path.removeprefix("/hooks") for r in got)
    for path in (
        "/login/watch",
        "/stepup/watch",
        "/authentication_factors/watch",
        "/corporates/kyb/watch",
        "/consumers/kyc/watch",
        "/managed_accounts/watch",
        "/ibans/watch",
        "/managed_accounts/deposits/watch",
        "/fees/watch",
        "/transfers/watch",
        "/send/watch",
        "/outgoing_wire_transfers/watch",
    ):
        assert paths[path] >= 1, (path, paths)
    hooks = "/hooks"
    assert "VERIFIED" in types(got, f"{hooks}/login/watch")
    assert "DECLINED" in types(got, f"{hooks}/login/watch")
    first_account = [
        r.json["type"]
        for r in got
        if r.path == f"{hooks}/managed_accounts/watch" and r.json["account"]["id"]["id"] == acc
    ]
    assert first_account == ["CREATED", "UPDATED", "BLOCKED", "UNBLOCKED"]
    removed = [
        r.json
        for r in got
        if r.path == f"{hooks}/managed_accounts/watch" and r.json["account"]["id"]["id"] == empty
    ]
    assert [e["type"] for e in removed] == ["CREATED", "DESTROYED"]
    assert removed[-1]["account"]["state"]["destroyType"] == "USER"
    assert types(got, f"{hooks}/ibans/watch")[:2] == ["REQUESTED", "CREATED"]
    assert types(got, f"{hooks}/send/watch") == ["PENDING_CHALLENGE", "COMPLETED"]
    assert types(got, f"{hooks}/outgoing_wire_transfers/watch") == [
        "PENDING_CHALLENGE",
        "SUBMITTED",
        "APPROVED",
        "COMPLETED",
    ]
    # The legacy shapes: amounts as strings, nested {type, id} ids.
    [t] = [r.json for r in got if r.path == f"{hooks}/transfers/watch"]
    assert t["transfer"]["id"] == {"type": "transfers", "id": transfer_id}
    assert t["transfer"]["destinationAmount"] == {"currency": "EUR", "amount": "5000"}
    assert t["eventType"] == "COMPLETED" and isinstance(t["publishedTimestamp"], str)
    s = [r.json for r in got if r.path == f"{hooks}/send/watch"][-1]
    assert s["send"]["id"] == {"type": "send", "id": send_id}
    assert s["send"]["challengeExemptionReason"] == "NO_EXEMPTION"
    w = [r.json for r in got if r.path == f"{hooks}/outgoing_wire_transfers/watch"][-1]
    assert w["transfer"]["id"] == {"type": "outgoing_wire_transfers", "id": owt_id}
    assert w["transfer"]["destination"]["sepa"]["iban"] == "DE89370400440532013000"
    assert w["owner"] == {"type": "CORPORATE", "id": ident.id}
    a = next(
        r.json
        for r in got
        if r.path == f"{hooks}/managed_accounts/watch" and r.json["account"]["id"]["id"] == acc
    )
    assert a["account"]["id"] == {"id": acc, "type": "managed_accounts"}
    assert a["account"]["balances"] == {"availableBalance": "0", "actualBalance": "0"}
    [dep] = [r.json for r in got if r.path == f"{hooks}/managed_accounts/deposits/watch"]
    assert dep["transactionAmount"] == {"currency": "EUR", "amount": "100000"}
    kyb = [r.json for r in got if r.path == f"{hooks}/corporates/kyb/watch"][-1]
    assert (kyb["corporateId"], kyb["status"]) == (ident.id, "APPROVED")
    assert kyb["corporateEmail"] == ident.email
    [fee] = [r.json for r in got if r.path == f"{hooks}/fees/watch"]
    assert fee["chargeFee"]["feeSubType"] == "ADMIN_FEE"
    assert fee["chargeFee"]["feeSpec"]["flatAmount"] == [{"currency": "EUR", "amount": "100"}]
    # Every delivery is in the operator's log, DELIVERED with its one attempt.
    log = await deliveries(client, admin_headers, p, limit=100)
    assert log["count"] == len(got)
    assert {d["state"] for d in log["deliveries"]} == {"DELIVERED"}
    assert all(len(d["attempts"]) == 1 for d in log["deliveries"])
    only = await deliveries(client, admin_headers, p, eventType="send")
    assert only["count"] == 2


async def test_a_refused_fee_records_no_event_and_moves_nothing(
    client, container, admin_headers, hooked
):
    """A fee charge's movement may go with the transaction's next round trip (decision 0024);
    with a webhook URL its event is recorded by the session, after it. A refused charge keeps
    neither."""
    p, receiver = hooked
    ident = await verified(client, p, "corporates")
    acc = (await open_account(client, ident, "EUR"))["id"]
    assert await deposit(client, p, acc, 160) == "COMPLETED"
    body = {"feeType": "ADMIN_FEE", "source": {"type": "managed_accounts", "id": acc}}
    url = "/multi/corporates/fees/charge"
    charged = []
    r = await client.post(url, headers=ident.headers, json=body)  # makes the revenue account
    assert r.status_code == 200, r.text
    charged.append(r.json()["transactionId"]["id"])
    for extra in ({}, {"idempotency-ref": "refused-fee"}):  # 60 left: refused
        r = await client.post(url, headers={**ident.headers, **extra}, json=body)
        assert (r.status_code, r.json()) == (409, {"errorCode": "FUNDS_INSUFFICIENT"})
    assert await deposit(client, p, acc, 40) == "COMPLETED"
    # The ref was not burnt by the refusal.
    r = await client.post(
        url, headers={**ident.headers, "idempotency-ref": "refused-fee"}, json=body
    )
    assert r.status_code == 200, r.text
    charged.append(r.json()["transactionId"]["id"])
    r = await client.get(f"/multi/managed_accounts/{acc}", headers=ident.headers)
    assert r.json()["balances"]["availableBalance"] == 0
    await deliver(container)
    fees = [e.json for e in receiver.received if e.path.endswith("/fees/watch")]
    assert [f["chargeFee"]["id"]["id"] for f in fees] == charged


async def test_a_programme_without_a_url_records_nothing(client, programme, container):
    p = await programme()
    ident = await verified(client, p, "corporates")
    await open_account(client, ident, "EUR")
    from sqlalchemy import func, select

    async with container.db.transaction() as s:
        n = (
            await s.execute(
                select(func.count())
                .select_from(WebhookEvent)
                .where(WebhookEvent.programme_id == int(p.id))
            )
        ).scalar_one()
    assert n == 0


async def account_events(client: httpx.AsyncClient, ident: Identity, count: int) -> str:
    acc = (await open_account(client, ident, "EUR"))["id"]
    for i in range(count - 1):
        r = await client.patch(
            f"/multi/managed_accounts/{acc}", headers=ident.headers, json={"tag": f"t{i}"}
        )
        assert r.status_code == 200
    return acc


async def test_500_then_204_delivers_with_the_same_call_ref(
    client, container, admin_headers, hooked
):
    p, receiver = hooked
    receiver.answer = lambda path, n: (500, b"down", {}) if n == 0 else (204, b"", {})
    ident = await verified(client, p, "corporates")
    receiver.received.clear()
    await deliver(container, allow_private=False)
    await account_events(client, ident, 1)
    await deliver(container)
    first = receiver.of("/hooks/managed_accounts/watch")
    assert len(first) == 1
    log = (await deliveries(client, admin_headers, p, eventType="managed_accounts"))["deliveries"]
    [d] = log
    assert d["state"] == "PENDING" and d["attemptCount"] == 1
    assert d["attempts"][0]["statusCode"] == 500 and d["attempts"][0]["outcome"] == "RETRY"
    assert d["nextAttemptAt"] - d["attempts"][0]["attemptedAt"] == retry_delay_ms(1) == 10_000
    await advance(client, p, 10)
    await deliver(container)
    both = receiver.of("/hooks/managed_accounts/watch")
    assert [r.call_ref for r in both] == [first[0].call_ref] * 2
    assert both[0].body == both[1].body
    [d] = (await deliveries(client, admin_headers, p, eventType="managed_accounts"))["deliveries"]
    assert d["state"] == "DELIVERED"
    assert [a["outcome"] for a in d["attempts"]] == ["RETRY", "DELIVERED"]


async def test_a_400_is_final_and_redelivery_sends_it_again(
    client, container, admin_headers, hooked
):
    p, receiver = hooked
    receiver.answer = lambda path, n: (400, b"x" * 5000, {}) if n == 0 else (204, b"", {})
    ident = await verified(client, p, "corporates")
    await deliver(container)
    receiver.received.clear()
    await account_events(client, ident, 1)
    await deliver(container)
    await advance(client, p, 3600)
    await deliver(container)
    assert len(receiver.of("/hooks/managed_accounts/watch")) == 1  # not retried
    [d] = (await deliveries(client, admin_headers, p, eventType="managed_accounts"))["deliveries"]
    assert (d["state"], d["attemptCount"]) == ("FAILED", 1)
    assert len(d["attempts"][0]["responseExcerpt"]) == 200  # never the whole answer
    url = f"{PORTAL}/{p.id}/webhooks/deliveries/{d['id']}/redeliver"
    r = await client.post(url, headers=admin_headers)
    assert r.status_code == 200 and r.json()["state"] == "PENDING"
    again = await client.post(url, headers=admin_headers)  # pending: still one series, due now
    assert again.status_code == 200 and again.json()["state"] == "PENDING"
    await deliver(container)
    sent = receiver.of("/hooks/managed_accounts/watch")
    assert len(sent) == 2 and sent[0].call_ref == sent[1].call_ref
    r = await client.get(f"{PORTAL}/{p.id}/webhooks/deliveries/{d['id']}", headers=admin_headers)
    assert r.json()["state"] == "DELIVERED"
    r = await client.get(f"{PORTAL}/{p.id}/webhooks/deliveries/1", headers=admin_headers)
    assert r.status_code == 404


async def test_five_retries_then_failed(client, container, admin_headers, hooked):
    p, receiver = hooked
    receiver.answer = lambda path, n: (503, b"", {})
    ident = await verified(client, p, "corporates")
    await deliver(container)
    receiver.received.clear()
    await account_events(client, ident, 1)
    await deliver(container)
    for delay in (10, 60, 360, 2160, 12960):
        await advance(client, p, delay - 1)
        await deliver(container)  # not due yet
        await advance(client, p, 1)
        await deliver(container)
    sent = receiver.of("/hooks/managed_accounts/watch")
    assert len(sent) == 6  # the first try and five retries
    [d] = (await deliveries(client, admin_headers, p, eventType="managed_accounts"))["deliveries"]
    assert (d["state"], d["attemptCount"]) == ("FAILED", 6)
    gaps = [
        b["attemptedAt"] - a["attemptedAt"]
        for a, b in zip(d["attempts"], d["attempts"][1:], strict=False)
    ]
    # 10 s x 6^n of the programme clock (plus the real time the test itself takes).
    wanted = [10_000, 60_000, 360_000, 2_160_000, 12_960_000]
    assert all(w <= g < w + 5_000 for g, w in zip(gaps, wanted, strict=True)), gaps
    await advance(client, p, 100_000)
    await deliver(container)
    assert len(receiver.of("/hooks/managed_accounts/watch")) == 6
    failed = await deliveries(
        client, admin_headers, p, state="FAILED", eventType="managed_accounts"
    )
    assert failed["count"] == 1


async def test_connection_errors_and_timeouts_retry(client, container, admin_headers, programme):
    p = await programme()
    with receiving() as gone:
        url = gone.url
    await settings(client, admin_headers, p, webhookUrl=url)  # nothing listens there now
    ident = await verified(client, p, "corporates")
    await deliver(container)
    log = (await deliveries(client, admin_headers, p))["deliveries"]
    assert log and all(d["state"] == "PENDING" for d in log)
    assert all(d["attempts"][0]["outcome"] == "RETRY" for d in log)
    assert all(d["attempts"][0]["statusCode"] is None for d in log)
    assert {d["eventType"] for d in log} == {"corporates/kyb.APPROVED"}  # the identity's event
    assert ident.id in {d["payload"]["corporateId"] for d in log}
    await settings(client, admin_headers, p, webhookUrl=None)
    async with container.db.transaction() as s:
        await s.execute(
            update(WebhookEvent)
            .where(WebhookEvent.programme_id == int(p.id))
            .values(state="FAILED")
        )


async def test_one_resources_events_arrive_in_order(client, container, hooked):
    p, receiver = hooked
    receiver.delay = 0.05
    ident = await verified(client, p, "corporates")
    await deliver(container)
    receiver.received.clear()
    accounts = [await account_events(client, ident, 6) for _ in range(3)]
    await deliver(container, rounds=100)
    for acc in accounts:
        tags = [
            r.json["account"]["tag"]
            for r in receiver.of("/hooks/managed_accounts/watch")
            if r.json["account"]["id"]["id"] == acc
        ]
        assert tags == ["", "t0", "t1", "t2", "t3", "t4"], tags


async def test_redirects_are_followed_only_on_the_same_host(
    client, container, admin_headers, hooked
):
    p, receiver = hooked
    same = receiver.url.removesuffix("/hooks") + "/moved"
    receiver.answer = lambda path, n: (
        (307, b"", {"location": same + path.removeprefix("/hooks")})
        if path.startswith("/hooks")
        else (204, b"", {})
    )
    ident = await verified(client, p, "corporates")
    await deliver(container)
    assert receiver.of("/moved/corporates/kyb/watch")  # followed: same host
    receiver.received.clear()
    receiver.answer = lambda path, n: (307, b"", {"location": "http://elsewhere.example/x"})
    await account_events(client, ident, 1)
    await deliver(container)
    [d] = (await deliveries(client, admin_headers, p, eventType="managed_accounts"))["deliveries"]
    assert d["state"] == "FAILED"
    assert "another host" in d["lastError"]


async def test_live_programmes_refuse_private_destinations(client, admin_headers, container):
    async def create(**body: Any) -> httpx.Response:
        return await client.post(
            PORTAL,
            headers=admin_headers,
            json={"name": f"live{__import__('secrets').token_hex(4)}", "mode": "live", **body},
        )

    for url in (
        "http://127.0.0.1:9/x",
        "http://10.1.2.3/x",
        "http://169.254.169.254/x",
        "http://[::1]/x",
    ):
        r = await create(webhookUrl=url)
        assert r.status_code == 409, (url, r.text)
        assert r.json()["errorCode"] == "WEBHOOK_URL_NOT_ALLOWED"
    r = await create(webhookUrl="https://93.184.215.14/hooks")  # a public address
    assert r.status_code == 201, r.text
    pid = r.json()["programmeId"]
    r = await client.patch(
        f"{PORTAL}/{pid}/settings", headers=admin_headers, json={"webhookUrl": "http://192.168.1.1"}
    )
    assert r.json()["errorCode"] == "WEBHOOK_URL_NOT_ALLOWED"
    r = await client.get(f"{PORTAL}/{pid}", headers=admin_headers)
    assert r.json()["settings"]["webhookUrl"] == "https://93.184.215.14/hooks"  # unchanged
    for bad in ("ftp://x.example", "not a url", "http://"):
        r = await client.patch(
            f"{PORTAL}/{pid}/settings", headers=admin_headers, json={"webhookUrl": bad}
        )
        assert r.status_code == 400, bad
    # The live programme's secret: made and shown by a rotation, once.
    r = await client.post(f"{PORTAL}/{pid}/webhook_secret", headers=admin_headers)
    first = r.json()["webhookSecret"]
    r = await client.post(f"{PORTAL}/{pid}/webhook_secret", headers=admin_headers)
    assert r.json()["webhookSecret"] != first


async def test_live_events_are_signed_with_the_live_secret(
    client, admin_headers, container, programme
):
    with receiving() as receiver:
        r = await client.post(
            PORTAL,
            headers=admin_headers,
            json={"name": f"live{__import__('secrets').token_hex(4)}", "mode": "live"},
        )
        live = r.json()
        pid = live["programmeId"]
        secret = (
            await client.post(f"{PORTAL}/{pid}/webhook_secret", headers=admin_headers)
        ).json()["webhookSecret"]
        # A loopback receiver, as only a server with MULTIBANK_WEBHOOKS_ALLOW_PRIVATE allows.
        async with container.db.transaction() as s:
            from multibank.programmes.models import Programme

            await s.execute(
                update(Programme).where(Programme.id == int(pid)).values(webhook_url=receiver.url)
            )
        p = Prog(pid, live["apiKey"], live["profiles"], live["feeTypes"])

        async def an_event() -> None:
            # A live programme's codes are not 123456: its events are made here directly.
            from multibank.factors import events
            from multibank.programmes.context import Ctx
            from multibank.programmes.models import Programme

            async with container.db.transaction() as s:
                programme = await s.get(Programme, int(pid))
                assert programme is not None
                ctx = Ctx(s, programme, container.clock.now_ms())
                await events.factor(ctx, 42, "SMS", "ACTIVE")

        await an_event()
        await deliver(container)  # refused: the server does not allow private addresses
        assert receiver.received == []
        log = await deliveries(client, admin_headers, p)
        assert {d["state"] for d in log["deliveries"]} == {"FAILED"}
        assert "loopback" in log["deliveries"][0]["lastError"]
        await an_event()
        await deliver(container, allow_private=True)
        [got] = receiver.received
        assert signed_by(secret, got) and not signed_by(p.api_key, got)
        sandbox = await client.post(
            f"{PORTAL}/{(await programme()).id}/webhook_secret", headers=admin_headers
        )
        assert sandbox.json()["errorCode"] == "WEBHOOK_SECRET_IS_API_KEY"


async def test_payloads_are_sent_as_recorded(client, container, hooked):
    p, receiver = hooked
    await verified(client, p, "corporates")
    await deliver(container)
    async with container.db.transaction() as s:
        from sqlalchemy import select

        rows = (
            (await s.execute(select(WebhookEvent).where(WebhookEvent.programme_id == int(p.id))))
            .scalars()
            .all()
        )
        recorded = {e.call_ref: e.payload.encode() for e in rows}
    assert {r.call_ref: r.body for r in receiver.received} == recorded
    assert all(json.loads(b) for b in recorded.values())


async def test_which_answers_are_retried(client, container, admin_headers, hooked):
    p, receiver = hooked
    ident = await verified(client, p, "corporates")
    await deliver(container)
    statuses = [408, 409, 425, 429, 502, 404, 401, 301]
    accounts = [(await open_account(client, ident, "EUR"))["id"] for _ in statuses]
    status_of = dict(zip(accounts, statuses, strict=True))

    def answer(got: Any) -> tuple[int, bytes, dict[str, str]]:
        # Each account's CREATED event gets its own status.
        status = status_of.get(got.json.get("account", {}).get("id", {}).get("id"), 204)
        return status, b"", {"location": "/elsewhere"} if status == 301 else {}

    receiver.answer_for = answer
    await deliver(container)
    log = await deliveries(client, admin_headers, p, eventType="managed_accounts", limit=100)
    outcome = {
        d["payload"]["account"]["id"]["id"]: d["attempts"][0]["outcome"] for d in log["deliveries"]
    }
    assert [outcome[a] for a in accounts] == ["RETRY"] * 5 + ["FAILED"] * 3


async def test_a_refused_wire_transfer_announces_nothing(client, admin_headers, hooked):
    """A wire transfer refused for funds is kept `INVALID` only so that its idempotency-ref stays
    taken (D12); no 3.29.1 client sees that state, so no event announces it (D12a)."""
    p, _ = hooked
    ident, acc = await customer(client, p, funds=1_000)

    def wire(amount: int) -> dict[str, Any]:
        return {
            "profileId": p.profiles["outgoingWireTransfers"],
            "sourceInstrument": {"type": "managed_accounts", "id": acc},
            "transferAmount": {"currency": "EUR", "amount": amount},
            "description": "Invoice 42",
            "destinationBeneficiary": {
                "name": "Ada Lovelace",
                "bankAccountDetails": {
                    "iban": "DE89370400440532013000",
                    "bankIdentifierCode": "COBADEFFXXX",
                },
            },
        }

    url = "/multi/outgoing_wire_transfers"
    r = await client.post(url, headers=ident.headers, json=wire(1_000))  # + fee 100: too much
    assert (r.status_code, r.json()) == (409, {"errorCode": "FUNDS_INSUFFICIENT"})
    r = await client.post(url, headers=ident.headers, json=wire(100))
    assert r.status_code == 200, r.text
    log = await deliveries(client, admin_headers, p, eventType="outgoing_wire_transfers")
    # Events of the accepted one only (its state steps); none of the refused one.
    assert log["count"] >= 1
    for d in log["deliveries"]:
        assert d["eventType"] != "outgoing_wire_transfers.INVALID"
        assert d["payload"]["transfer"]["id"]["id"] == r.json()["id"], d
