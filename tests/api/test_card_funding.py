"""Funding and emptying prepaid cards (cards.md §5.1, D12, D19, D23): transfers and sends take a
prepaid card as source or destination exactly like an account (account↔card, card↔card), a
debit card is refused either way, a blocked or removed card as an account would be, a refusal
moves nothing; a wire transfer's source cannot be a card; a fee may be charged to a prepaid card
but not to a debit card. Black-box over HTTP, on `/multi` and `/3.29.1/multi`."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.api.fees_support import PORTAL, ledger_ok, revenue
from tests.api.fees_support import charge as charge_fee
from tests.api.payments_support import enrol_sms, profile, settings
from tests.api.test_card_assign import make_pool, pool_state
from tests.api.test_managed_cards import act, create
from tests.api.test_sends import start_and_verify
from tests.api.webhook_support import receiving
from tests.conftest import Prog
from tests.factories import Identity, deposit, login, open_account, verified

LATEST, PINNED = "/multi", "/3.29.1/multi"
BOTH = pytest.mark.parametrize("base", [LATEST, PINNED])
CARDS, ACCOUNTS = "managed_cards", "managed_accounts"


def ref(kind: str, instrument_id: str) -> dict[str, str]:
    return {"type": kind, "id": instrument_id}


def body(
    p: Prog,
    source: dict[str, str],
    destination: dict[str, str],
    amount: int = 100,
    kind: str = "transfers",
    currency: str = "EUR",
) -> dict[str, Any]:
    return {
        "profileId": p.profiles[kind],
        "source": source,
        "destination": destination,
        "destinationAmount": {"currency": currency, "amount": amount},
    }


async def move(
    client: httpx.AsyncClient,
    ident: Identity,
    json: dict[str, Any],
    base: str = LATEST,
    path: str = "transfers",
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    return await client.post(f"{base}/{path}", headers=headers or ident.headers, json=json)


async def held(client: httpx.AsyncClient, ident: Identity, instrument: dict[str, str]) -> Any:
    """(available, actual) of an account or a prepaid card."""
    r = await client.get(f"/multi/{instrument['type']}/{instrument['id']}", headers=ident.headers)
    assert r.status_code == 200, r.text
    b = r.json()["balances"]
    return b["availableBalance"], b["actualBalance"]


async def customer(
    client: httpx.AsyncClient, p: Prog, funds: int = 1000, kind: str = "corporates"
) -> tuple[Identity, dict[str, str], dict[str, str], dict[str, str]]:
    """A verified identity with an EUR account holding `funds` and two empty EUR prepaid cards."""
    ident = await verified(client, p, kind)
    acc = (await open_account(client, ident, "EUR", friendlyName="Main"))["id"]
    if funds:
        assert await deposit(client, p, acc, funds) == "COMPLETED"
    one = (await create(client, ident, friendlyName="Travel"))["id"]
    two = (await create(client, ident, friendlyName="Groceries"))["id"]
    return ident, ref(ACCOUNTS, acc), ref(CARDS, one), ref(CARDS, two)


async def debit_card(
    client: httpx.AsyncClient, ident: Identity, parent: dict[str, str]
) -> dict[str, str]:
    card = await create(client, ident, mode="DEBIT_MODE", parentManagedAccountId=parent["id"])
    return ref(CARDS, card["id"])


async def refused(
    client: httpx.AsyncClient,
    ident: Identity,
    json: dict[str, Any],
    code: str,
    watched: list[dict[str, str]],
    path: str = "transfers",
) -> None:
    before = [await held(client, ident, i) for i in watched]
    r = await move(client, ident, json, path=path)
    assert (r.status_code, r.json()) == (409, {"errorCode": code}), r.text
    assert [await held(client, ident, i) for i in watched] == before


# Transfers


@BOTH
async def test_account_to_card_card_to_card_and_card_to_account(
    client, programme, container, admin_headers, base
):
    p = await programme()
    await profile(client, admin_headers, p, "transfers", fees={"EUR": 15})
    ident, acc, one, two = await customer(client, p)

    r = await move(client, ident, body(p, acc, one, 200), base)
    assert r.status_code == 200, r.text
    t = r.json()
    assert (t["source"], t["destination"], t["state"]) == (acc, one, "COMPLETED")
    assert await held(client, ident, acc) == (785, 785)
    assert await held(client, ident, one) == (200, 200)

    r = await move(client, ident, body(p, one, two, 50), base)
    assert r.status_code == 200, r.text
    assert (r.json()["source"], r.json()["destination"]) == (one, two)
    assert await held(client, ident, one) == (135, 135)
    assert await held(client, ident, two) == (50, 50)

    r = await move(client, ident, body(p, two, acc, 35), base)
    assert r.status_code == 200, r.text
    assert await held(client, ident, two) == (0, 0)  # emptied: amount + fee
    assert await held(client, ident, acc) == (820, 820)
    assert await revenue(container.db, p) == 45  # one fee per transfer, whatever the pair

    r = await client.get(f"{base}/transfers/{t['id']}", headers=ident.headers)
    assert r.status_code == 200 and r.json() == t
    r = await client.get(
        f"{base}/transfers",
        headers=ident.headers,
        params={"instrumentId[type]": CARDS, "instrumentId[id]": two["id"]},
    )
    assert r.status_code == 200 and r.json()["count"] == 2
    await ledger_ok(client, admin_headers, p)


async def test_a_debit_card_is_neither_source_nor_destination(client, programme):
    p = await programme()
    ident, acc, one, _ = await customer(client, p)
    assert (await move(client, ident, body(p, acc, one, 300))).status_code == 200
    parent = ref(ACCOUNTS, (await open_account(client, ident, "EUR"))["id"])
    assert await deposit(client, p, parent["id"], 100) == "COMPLETED"
    debit = await debit_card(client, ident, parent)
    watched = [acc, one, parent]
    await refused(client, ident, body(p, debit, acc), "SOURCE_CANNOT_BE_DEBIT_MODE_CARD", watched)
    await refused(client, ident, body(p, debit, one), "SOURCE_CANNOT_BE_DEBIT_MODE_CARD", watched)
    await refused(
        client, ident, body(p, acc, debit), "DESTINATION_CANNOT_BE_DEBIT_MODE_CARD", watched
    )
    await refused(
        client, ident, body(p, one, debit), "DESTINATION_CANNOT_BE_DEBIT_MODE_CARD", watched
    )
    # Not even between the card and its own parent account.
    await refused(
        client, ident, body(p, parent, debit), "DESTINATION_CANNOT_BE_DEBIT_MODE_CARD", watched
    )
    await refused(
        client, ident, body(p, debit, parent), "SOURCE_CANNOT_BE_DEBIT_MODE_CARD", watched
    )
    r = await client.get("/multi/transfers", headers=ident.headers)
    assert r.json()["count"] == 1


async def test_blocked_removed_unknown_and_others_cards_are_refused(client, programme):
    p = await programme()
    ident, acc, one, two = await customer(client, p)
    assert (await move(client, ident, body(p, acc, one, 300))).status_code == 200
    _, _, theirs, _ = await customer(client, p, funds=0)
    watched = [acc, one, two]

    assert (await act(client, ident, one["id"], "block")).status_code == 204
    await refused(client, ident, body(p, one, acc), "SOURCE_INSTRUMENT_BLOCKED", watched)
    await refused(client, ident, body(p, acc, one), "DESTINATION_INSTRUMENT_BLOCKED", watched)
    assert (await act(client, ident, one["id"], "unblock")).status_code == 204
    assert (await move(client, ident, body(p, one, two, 10))).status_code == 200

    empty = ref(CARDS, (await create(client, ident))["id"])
    assert (await act(client, ident, empty["id"], "remove")).status_code == 204
    await refused(client, ident, body(p, acc, empty), "DESTINATION_INSTRUMENT_DESTROYED", watched)
    await refused(client, ident, body(p, empty, acc), "SOURCE_INSTRUMENT_DESTROYED", watched)

    await refused(client, ident, body(p, ref(CARDS, "999999"), acc), "SOURCE_NOT_FOUND", watched)
    await refused(
        client, ident, body(p, acc, ref(CARDS, "999999")), "DESTINATION_NOT_FOUND", watched
    )
    await refused(client, ident, body(p, theirs, acc), "SOURCE_NOT_FOUND", watched)  # another's
    await refused(client, ident, body(p, acc, theirs), "DESTINATION_NOT_FOUND", watched)
    # An account id named as a card is no card, and the reverse.
    await refused(client, ident, body(p, ref(CARDS, acc["id"]), one), "SOURCE_NOT_FOUND", watched)
    await refused(
        client, ident, body(p, acc, ref(ACCOUNTS, two["id"])), "DESTINATION_NOT_FOUND", watched
    )
    await refused(
        client, ident, body(p, one, one), "SOURCE_AND_DESTINATION_MUST_BE_DIFFERENT", watched
    )
    gbp = ref(CARDS, (await create(client, ident, currency="GBP"))["id"])
    await refused(client, ident, body(p, one, gbp), "CURRENCY_MISMATCH", watched)


async def test_a_transfer_refused_for_funds_moves_nothing(client, programme, admin_headers):
    p = await programme()
    await profile(client, admin_headers, p, "transfers", fees={"EUR": 5})
    ident, acc, one, two = await customer(client, p)
    assert (await move(client, ident, body(p, acc, one, 100))).status_code == 200
    watched = [acc, one, two]
    await refused(client, ident, body(p, one, two, 100), "FUNDS_INSUFFICIENT", watched)  # fee
    await refused(client, ident, body(p, two, acc, 1), "FUNDS_INSUFFICIENT", watched)  # empty
    await refused(client, ident, body(p, acc, one, 2_000), "FUNDS_INSUFFICIENT", watched)
    # No pending money either: the card's statement has the one funding entry.
    r = await client.get(f"/multi/managed_cards/{one['id']}/statement", headers=ident.headers)
    assert [e["transactionId"]["type"] for e in r.json()["entry"]] == ["TRANSFER"]
    assert (await move(client, ident, body(p, one, two, 95))).status_code == 200
    assert await held(client, ident, one) == (0, 0)


async def test_refused_callers(client, programme):
    p, other = await programme(), await programme()
    ident, acc, one, _ = await customer(client, p)
    json = body(p, acc, one, 5)
    token = {"Authorization": f"Bearer {ident.token}"}
    for headers, status in [
        (token, 400),  # no api-key
        ({"api-key": "nope", **token}, 401),
        ({**other.headers, **token}, 403),  # another programme's key
        (p.headers, 401),  # no token
    ]:
        for path in ("transfers", "sends"):
            r = await move(client, ident, json, path=path, headers=headers)
            assert r.status_code == status, (path, headers, r.text)
    assert await held(client, ident, one) == (0, 0)
    assert await held(client, ident, acc) == (1000, 1000)
    # Another identity's session cannot move this identity's card money.
    intruder, theirs, _, _ = await customer(client, p, funds=0)
    r = await move(client, intruder, body(p, one, theirs, 1))
    assert (r.status_code, r.json()) == (409, {"errorCode": "SOURCE_NOT_FOUND"})
    r = await client.get(f"/multi/managed_cards/{one['id']}", headers=intruder.headers)
    assert r.status_code == 404


async def test_version_3_1_0_has_no_transfers_of_cards(client, programme):
    p = await programme()
    ident, acc, one, _ = await customer(client, p)
    r = await move(client, ident, body(p, acc, one, 5), "/3.1.0/multi")
    assert r.status_code == 404
    assert await held(client, ident, acc) == (1000, 1000)


# Sends


async def test_sends_to_and_from_prepaid_cards(client, programme, admin_headers):
    p = await programme()
    await settings(client, admin_headers, p, sendsScaRequired=False)
    await profile(client, admin_headers, p, "sends", fees={"EUR": 3})
    ident, acc, one, _ = await customer(client, p)
    payee, payee_acc, payee_card, _ = await customer(client, p, funds=0, kind="consumers")

    r = await move(client, ident, body(p, acc, payee_card, 100, "sends"), path="sends")
    assert r.status_code == 200, r.text
    assert (r.json()["destination"], r.json()["state"]) == (payee_card, "COMPLETED")
    assert await held(client, ident, acc) == (897, 897)
    assert await held(client, payee, payee_card) == (100, 100)

    assert (await move(client, ident, body(p, acc, one, 200))).status_code == 200
    r = await move(client, ident, body(p, one, payee_acc, 50, "sends"), path="sends")
    assert r.status_code == 200, r.text
    assert r.json()["source"] == one
    assert await held(client, ident, one) == (147, 147)
    assert await held(client, payee, payee_acc) == (50, 50)

    # The payee's card statement names where the money came from.
    r = await client.get(
        f"/multi/managed_cards/{payee_card['id']}/statement", headers=payee.headers
    )
    [entry] = r.json()["entry"]
    assert entry["transactionId"]["type"] == "SEND"
    assert entry["transactionAmount"] == {"currency": "EUR", "amount": 100}
    assert entry["additionalFields"]["sourceInstrumentType"] == ACCOUNTS
    assert entry["additionalFields"]["sourceInstrumentId"] == acc["id"]


async def test_a_send_from_a_card_waits_for_its_challenge_held_on_the_card(
    client, programme, admin_headers
):
    p = await programme()  # sends need SCA by default; 5000 is above the low-value exemption
    await profile(client, admin_headers, p, "sends", fees={"EUR": 7})
    ident, acc, one, _ = await customer(client, p, funds=10_000)
    await enrol_sms(client, ident.headers)
    payee, _, payee_card, _ = await customer(client, p, funds=0, kind="consumers")
    assert (await move(client, ident, body(p, acc, one, 6_000))).status_code == 200

    r = await move(client, ident, body(p, one, payee_card, 5_000, "sends"), path="sends")
    assert r.status_code == 200, r.text
    send_id = r.json()["id"]
    assert r.json()["state"] == "PENDING"
    assert await held(client, ident, one) == (993, 6_000)  # amount + fee held
    r = await client.get(f"/multi/managed_cards/{one['id']}/statement", headers=ident.headers)
    pending = r.json()["entry"][0]
    assert (pending["transactionId"]["id"], pending["entryState"]) == (send_id, "PENDING")
    assert pending["balanceAfter"] == {"currency": "EUR", "amount": 993}  # available (D23)

    await start_and_verify(client, ident, send_id)
    assert await held(client, ident, one) == (993, 993)
    assert await held(client, payee, payee_card) == (5_000, 5_000)
    r = await client.get(f"/multi/managed_cards/{one['id']}/statement", headers=ident.headers)
    done = r.json()["entry"][0]
    assert (done["entryState"], done["cardholderFee"]["amount"]) == ("COMPLETED", 7)
    assert done["actualBalanceAdjustment"] == {"currency": "EUR", "amount": -5_007}
    assert done["additionalFields"]["destinationInstrumentType"] == CARDS
    assert done["additionalFields"]["destinationInstrumentId"] == payee_card["id"]
    await ledger_ok(client, admin_headers, p)


async def test_sends_refuse_debit_own_and_foreign_cards(client, programme, admin_headers):
    p, elsewhere = await programme(), await programme()
    await settings(client, admin_headers, p, sendsScaRequired=False)
    ident, acc, one, _ = await customer(client, p)
    payee, payee_acc, _, _ = await customer(client, p, funds=0)
    payee_debit = await debit_card(client, payee, payee_acc)
    _, _, foreign_card, _ = await customer(client, elsewhere, funds=0)
    watched = [acc, one]

    def send(src: dict[str, str], dst: dict[str, str]) -> dict[str, Any]:
        return body(p, src, dst, 10, "sends")

    await refused(
        client,
        ident,
        send(acc, payee_debit),
        "DESTINATION_CANNOT_BE_DEBIT_MODE_CARD",
        watched,
        "sends",
    )
    await refused(
        client, ident, send(acc, one), "DESTINATION_BELONGS_TO_SAME_IDENTITY", watched, "sends"
    )
    await refused(
        client,
        ident,
        send(acc, foreign_card),
        "SOURCE_AND_DESTINATION_MUST_BE_IN_SAME_PROGRAMME",
        watched,
        "sends",
    )
    await refused(
        client, ident, send(acc, ref(CARDS, "999999")), "DESTINATION_NOT_FOUND", watched, "sends"
    )
    own_debit = await debit_card(client, ident, acc)
    await refused(
        client,
        ident,
        send(own_debit, payee_acc),
        "SOURCE_CANNOT_BE_DEBIT_MODE_CARD",
        watched,
        "sends",
    )
    await refused(client, ident, send(one, payee_acc), "FUNDS_INSUFFICIENT", watched, "sends")


# Wire transfers and fees


async def test_a_wire_transfer_cannot_leave_from_a_card(client, programme):
    p = await programme()
    ident, acc, one, _ = await customer(client, p)
    assert (await move(client, ident, body(p, acc, one, 300))).status_code == 200
    r = await client.post(
        "/multi/outgoing_wire_transfers",
        headers=ident.headers,
        json={
            "profileId": p.profiles["outgoingWireTransfers"],
            "sourceInstrument": one,
            "transferAmount": {"currency": "EUR", "amount": 10},
            "description": "Rent",
            "destinationBeneficiary": {
                "name": "Ada Lovelace",
                "bankAccountDetails": {
                    "iban": "DE89370400440532013000",
                    "bankIdentifierCode": "COBADEFFXXX",
                },
            },
        },
    )
    assert (r.status_code, r.json()) == (409, {"errorCode": "SOURCE_NOT_FOUND"})
    assert await held(client, ident, one) == (300, 300)


@BOTH
async def test_a_fee_is_charged_to_a_prepaid_card_not_a_debit_card(
    client, programme, container, base
):
    p = await programme()
    ident, acc, one, _ = await customer(client, p)
    assert (await move(client, ident, body(p, acc, one, 300))).status_code == 200
    r = await charge_fee(client, ident, one["id"], base, body=fee(one))
    assert r.status_code == 200, r.text
    assert r.json()["source"] == one
    assert r.json()["availableBalanceAdjustment"] == {"currency": "EUR", "amount": -100}
    assert await held(client, ident, one) == (200, 200)
    assert await revenue(container.db, p) == 100
    r = await client.get(f"/multi/managed_cards/{one['id']}/statement", headers=ident.headers)
    newest = r.json()["entry"][0]
    assert newest["transactionId"]["type"] == "CHARGE_FEE"
    assert newest["transactionAmount"] == {"currency": "EUR", "amount": -100}
    assert newest["balanceAfter"] == {"currency": "EUR", "amount": 200}

    debit = await debit_card(client, ident, acc)
    _, _, theirs, _ = await customer(client, p, funds=0)
    for source, code in (
        (debit, "UNRESOLVED_INSTRUMENT"),
        (ref(CARDS, "999999"), "UNRESOLVED_INSTRUMENT"),
        (theirs, "IDENTITY_NOT_OWNER_OF_INSTRUMENT"),
    ):
        r = await charge_fee(client, ident, source["id"], base, body=fee(source))
        assert (r.status_code, r.json()) == (409, {"errorCode": code}), source
    assert await held(client, ident, acc) == (700, 700)
    r = await charge_fee(client, ident, one["id"], base, body=fee(one, "NO_SUCH"))
    assert r.status_code == 409
    assert await held(client, ident, one) == (200, 200)


def fee(source: dict[str, str], fee_type: str = "ADMIN_FEE") -> dict[str, Any]:
    return {"feeType": fee_type, "source": source}


# Webhooks


async def events(
    client: httpx.AsyncClient, admin: dict[str, str], p: Prog, topic: str
) -> list[dict[str, Any]]:
    r = await client.get(
        f"{PORTAL}/{p.id}/webhooks/deliveries", headers=admin, params={"eventType": topic}
    )
    assert r.status_code == 200, r.text
    return [d["payload"] for d in r.json()["deliveries"]]


async def test_payment_and_fee_events_name_the_card(client, programme, admin_headers):
    with receiving() as receiver:
        p = await programme()
        await settings(client, admin_headers, p, webhookUrl=receiver.url, sendsScaRequired=False)
        ident, acc, one, _ = await customer(client, p)
        _, _, payee_card, _ = await customer(client, p, funds=0)
        t = (await move(client, ident, body(p, acc, one, 300))).json()
        s = (await move(client, ident, body(p, one, payee_card, 10, "sends"), path="sends")).json()
        r = await charge_fee(client, ident, one["id"], body=fee(one))
        assert r.status_code == 200, r.text

        [transfer] = [e["transfer"] for e in await events(client, admin_headers, p, "transfers")]
        assert transfer["id"]["id"] == t["id"]
        assert (transfer["source"], transfer["destination"]) == (acc, one)
        [sent] = [e["send"] for e in await events(client, admin_headers, p, "send")]
        assert sent["id"]["id"] == s["id"]
        assert (sent["source"], sent["destination"]) == (one, payee_card)
        [charged] = [e["chargeFee"] for e in await events(client, admin_headers, p, "fees")]
        assert charged["source"] == one


async def test_a_logged_out_session_moves_nothing(client, programme):
    p = await programme()
    ident, acc, one, _ = await customer(client, p)
    token = (await login(client, p, ident.email)).json()["token"]
    headers = {**p.headers, "Authorization": f"Bearer {token}"}
    assert (await client.post("/multi/logout", headers=headers)).status_code == 204
    r = await move(client, ident, body(p, acc, one, 5), headers=headers)
    assert r.status_code == 401
    assert await held(client, ident, one) == (0, 0)


async def test_a_pool_card_is_no_ones_destination(client, programme, admin_headers):
    p = await programme()
    await settings(client, admin_headers, p, sendsScaRequired=False)
    ident, acc, _, _ = await customer(client, p)
    await make_pool(client, admin_headers, p, "corporate", 1)
    [pooled] = (await pool_state(client, admin_headers, p))["cards"]
    unassigned = ref(CARDS, pooled["id"])
    await refused(client, ident, body(p, acc, unassigned), "DESTINATION_NOT_FOUND", [acc])
    await refused(
        client,
        ident,
        body(p, acc, unassigned, kind="sends"),
        "DESTINATION_NOT_FOUND",
        [acc],
        "sends",
    )
    await refused(client, ident, body(p, unassigned, acc), "SOURCE_NOT_FOUND", [acc])
