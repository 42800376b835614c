"""The managed-card statement (cards.md §3.8, §5.1, §5.3; D23, D28, D30), black-box over HTTP on
`/multi` and `/3.29.1/multi` (3.1.0 has none): a prepaid card's money movements newest first with
the available balance after each, transfers naming the other side, the filters, ordering and
paging, CSV and PDF, step-up, and who gets a 404; card payment steps (authorisation, settlement,
reversal, expiry, refund) with their merchant fields, on a prepaid card, on a debit card (no
balances) and on the debit card's parent account (`relatedCardId`), driven through
the card simulator."""

from __future__ import annotations

import csv
import io
from typing import Any

import httpx
import pytest

from tests.api.payments_support import advance, profile
from tests.api.test_card_funding import ACCOUNTS, CARDS, body, debit_card, held, move, ref
from tests.api.test_factors import assert_step_up_required, enrol_sms
from tests.api.test_managed_cards import create
from tests.api.test_statements import pdf_text
from tests.conftest import Prog
from tests.factories import Identity, deposit, login, open_account, otp_step_up, verified

LATEST, PINNED = "/multi", "/3.29.1/multi"
BOTH = pytest.mark.parametrize("base", [LATEST, PINNED])
EUR = "EUR"


async def statement(
    client: httpx.AsyncClient,
    ident: Identity,
    card_id: str,
    base: str = LATEST,
    headers: dict[str, str] | None = None,
    **params: Any,
) -> httpx.Response:
    return await client.get(
        f"{base}/managed_cards/{card_id}/statement",
        headers=headers or ident.headers,
        params=params,
    )


async def entries(
    client: httpx.AsyncClient, ident: Identity, card_id: str, base: str = LATEST, **params: Any
) -> list[dict[str, Any]]:
    r = await statement(client, ident, card_id, base, **params)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["responseCount"] == len(body["entry"])
    out: list[dict[str, Any]] = body["entry"]
    return out


def amount(value: int) -> dict[str, Any]:
    return {"currency": EUR, "amount": value}


async def funded_card(
    client: httpx.AsyncClient, p: Prog, funds: int = 1000, kind: str = "corporates"
) -> tuple[Identity, dict[str, str], dict[str, str]]:
    """A verified identity with an EUR account ("Main") holding `funds` and an empty prepaid
    card ("Travel")."""
    ident = await verified(client, p, kind)
    acc = (await open_account(client, ident, EUR, friendlyName="Main"))["id"]
    if funds:
        assert await deposit(client, p, acc, funds) == "COMPLETED"
    card = (await create(client, ident, friendlyName="Travel"))["id"]
    return ident, ref(ACCOUNTS, acc), ref(CARDS, card)


# Transfers on the card's statement


@BOTH
async def test_two_transfers_onto_a_new_card_are_its_two_entries(client, programme, base):
    p = await programme()
    ident, acc, card = await funded_card(client, p)
    r = await statement(client, ident, card["id"], base)
    assert r.status_code == 200, r.text
    assert r.json() == {"entry": [], "count": 0, "responseCount": 0}  # no instrument event

    first = (await move(client, ident, body(p, acc, card, 50), base)).json()
    second = (await move(client, ident, body(p, acc, card, 50), base)).json()
    r = await statement(client, ident, card["id"], base)
    got = r.json()
    assert got["count"] == 2
    newest, oldest = got["entry"]
    assert [newest["transactionId"], oldest["transactionId"]] == [
        {"type": "TRANSFER", "id": second["id"]},
        {"type": "TRANSFER", "id": first["id"]},
    ]
    assert [newest["balanceAfter"], oldest["balanceAfter"]] == [amount(100), amount(50)]
    assert newest == {
        "transactionId": {"type": "TRANSFER", "id": second["id"]},
        "entryState": "COMPLETED",
        "transactionAmount": amount(50),
        "availableBalanceAdjustment": amount(50),
        "actualBalanceAdjustment": amount(50),
        "balanceAfter": amount(100),
        "availableBalanceAfter": amount(100),
        "actualBalanceAfter": amount(100),
        "transactionFee": amount(0),
        "cardholderFee": amount(0),
        "processedTimestamp": second["creationTimestamp"],
        "additionalFields": {
            "sourceInstrumentType": "managed_accounts",
            "sourceInstrumentId": acc["id"],
            "sourceInstrumentFriendlyName": "Main",
        },
    }


async def test_a_card_paying_a_transfer_shows_amount_and_fee(client, programme, admin_headers):
    p = await programme()
    await profile(client, admin_headers, p, "transfers", fees={"EUR": 15})
    ident, acc, card = await funded_card(client, p)
    assert (await move(client, ident, body(p, acc, card, 200))).status_code == 200
    t = (await move(client, ident, body(p, card, acc, 50))).json()
    [paid, funded] = await entries(client, ident, card["id"])
    assert paid["transactionId"] == {"type": "TRANSFER", "id": t["id"]}
    for field in ("transactionAmount", "availableBalanceAdjustment", "actualBalanceAdjustment"):
        assert paid[field] == amount(-65), field
    assert paid["cardholderFee"] == paid["transactionFee"] == amount(15)
    assert paid["balanceAfter"] == paid["actualBalanceAfter"] == amount(135)
    assert paid["additionalFields"] == {
        "destinationInstrumentType": "managed_accounts",
        "destinationInstrumentId": acc["id"],
        "destinationInstrumentFriendlyName": "Main",
    }
    assert funded["cardholderFee"] == amount(0) and funded["balanceAfter"] == amount(200)
    # The account's incoming entry names the card it came from (D30).
    r = await client.get(f"/multi/managed_accounts/{acc['id']}/statement", headers=ident.headers)
    incoming = r.json()["entry"][0]
    assert incoming["transactionAmount"] == amount(50)
    assert incoming["additionalFields"] == {
        "sourceInstrumentType": "managed_cards",
        "sourceInstrumentId": card["id"],
        "sourceInstrumentFriendlyName": "Travel",
    }


# Filters, order, pages, formats


async def three_transfers(
    client: httpx.AsyncClient, p: Prog
) -> tuple[Identity, dict[str, str], list[dict[str, Any]]]:
    ident, acc, card = await funded_card(client, p)
    done = []
    for value in (10, 20, 30):
        r = await move(client, ident, body(p, acc, card, value))
        assert r.status_code == 200, r.text
        done.append(r.json())
        await advance(client, p, 60)
    return ident, card, done


async def test_filters_order_and_pages(client, programme):
    p = await programme()
    ident, card, done = await three_transfers(client, p)
    ids = [t["id"] for t in done]
    at = [t["creationTimestamp"] for t in done]
    cid = card["id"]

    def listed(got: list[dict[str, Any]]) -> list[str]:
        return [e["transactionId"]["id"] for e in got]

    assert listed(await entries(client, ident, cid)) == ids[::-1]
    oldest_first = await entries(client, ident, cid, orderByTimestamp="ASC")
    assert listed(oldest_first) == ids
    assert [e["balanceAfter"]["amount"] for e in oldest_first] == [10, 30, 60]
    r = await statement(client, ident, cid, limit=1, offset=1)
    assert (r.json()["count"], listed(r.json()["entry"])) == (3, [ids[1]])
    assert r.json()["entry"][0]["balanceAfter"] == amount(30)
    got = await entries(client, ident, cid, fromTimestamp=at[1], toTimestamp=at[2])
    assert listed(got) == [ids[2], ids[1]]  # inclusive bounds
    everything = await entries(
        client,
        ident,
        cid,
        fromTimestamp=at[0],
        toTimestamp=at[1],
        orderByTimestamp="ASC",
        offset=1,
        limit=5,
        showFundMovementsOnly="false",
    )
    assert listed(everything) == [ids[1]]
    assert everything[0]["balanceAfter"] == amount(30)
    for flag in ("true", "false"):  # accepted, changes nothing
        assert listed(await entries(client, ident, cid, showFundMovementsOnly=flag)) == ids[::-1]
    future = await statement(client, ident, cid, fromTimestamp=at[2] + 10**9)
    assert future.json() == {"entry": [], "count": 0, "responseCount": 0}
    for params in (
        {"limit": 0},
        {"offset": -1},
        {"orderByTimestamp": "UP"},
        {"fromTimestamp": "soon"},
    ):
        r = await statement(client, ident, cid, **params)
        assert r.status_code == 400, (params, r.text)
        assert "syntaxErrors" in r.json(), r.text


@BOTH
async def test_csv_pdf_and_other_accept_values(client, programme, base):
    p = await programme()
    ident, card, done = await three_transfers(client, p)
    r = await statement(client, ident, card["id"], base, {**ident.headers, "accept": "text/csv"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(r.text)))
    assert [row["transactionId.id"] for row in rows] == [t["id"] for t in done][::-1]
    assert [row["balanceAfter.amount"] for row in rows] == ["60", "30", "10"]
    assert rows[0]["additionalFields.sourceInstrumentFriendlyName"] == "Main"

    r = await statement(
        client, ident, card["id"], base, {**ident.headers, "accept": "application/pdf"}
    )
    assert r.status_code == 200 and r.content.startswith(b"%PDF")
    text = pdf_text(r.content)
    assert "Card statement" in text and card["id"] in text and "Travel" in text

    for accept in ("application/xml", "nonsense"):
        r = await statement(client, ident, card["id"], base, {**ident.headers, "accept": accept})
        assert r.status_code == 200 and r.json()["count"] == 3, accept


# Who may read it


async def test_step_up_is_demanded_when_the_programme_wants_it(client, programme):
    p = await programme(stepUpRequired=True)
    ident = await verified(client, p, "corporates")
    await enrol_sms(client, ident.headers)
    await otp_step_up(client, ident.headers)
    acc = (await open_account(client, ident, EUR))["id"]
    assert await deposit(client, p, acc, 100) == "COMPLETED"
    card = (await create(client, ident))["id"]
    r = await move(client, ident, body(p, ref(ACCOUNTS, acc), ref(CARDS, card), 40))
    assert r.status_code == 200, r.text
    for base in (LATEST, PINNED):
        assert len(await entries(client, ident, card, base)) == 1
    await advance(client, p, 61)  # the first session's step-up is no longer recent (0059)
    r = await login(client, p, ident.email)
    fresh = {**p.headers, "Authorization": f"Bearer {r.json()['token']}"}
    for base in (LATEST, PINNED):
        for accept in ("application/json", "text/csv", "application/pdf"):
            r = await statement(client, ident, card, base, {**fresh, "accept": accept})
            assert_step_up_required(r)
    await otp_step_up(client, fresh)
    r = await statement(client, ident, card, headers=fresh)
    assert r.status_code == 200 and r.json()["count"] == 1


async def test_others_unknown_and_refused_callers(client, programme):
    p, other_programme = await programme(), await programme()
    ident, acc, card = await funded_card(client, p)
    assert (await move(client, ident, body(p, acc, card, 40))).status_code == 200
    intruder = await verified(client, p, "consumers")
    for who, card_id in ((intruder, card["id"]), (ident, "999999"), (ident, acc["id"])):
        r = await statement(client, who, card_id)
        assert r.status_code == 404, (card_id, r.text)
    r = await statement(client, ident, card["id"], "/3.1.0/multi")
    assert r.status_code == 404
    token = {"Authorization": f"Bearer {ident.token}"}
    for headers, status in (
        (token, 400),  # no api-key
        ({"api-key": "nope", **token}, 401),
        ({**other_programme.headers, **token}, 403),
        (p.headers, 401),  # no token
    ):
        r = await statement(client, ident, card["id"], headers=headers)
        assert r.status_code == status, (headers, r.text)
    r = await client.get("/multi/managed_cards//statement", headers=ident.headers)
    assert r.status_code in (400, 404, 405)
    assert (await held(client, ident, card)) == (40, 40)


# Card payment steps, through the card simulator (cards.md §5.3, §6.1)

SIM = "/simulate/api"
MERCHANT = {
    "merchantName": "Amazon IT",
    "merchantCategoryCode": "5399",
    "transactionCountry": "MLT",
}


async def simulated(
    client: httpx.AsyncClient, p: Prog, path: str, body: dict[str, Any] | None = None
) -> dict[str, Any]:
    r = await client.post(f"{SIM}/cards/{path}", headers={"programme-key": p.api_key}, json=body)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def buy(value: int) -> dict[str, Any]:
    return {**MERCHANT, "transactionAmount": {"currency": EUR, "amount": value}}


def merchant_of(entry: dict[str, Any]) -> dict[str, str]:
    fields = entry["additionalFields"]
    return {k: fields[k] for k in ("merchantName", "merchantCategoryCode") if k in fields} | {
        "country": fields.get("merchantTerminalCountry", "")
    }


EXPECTED_MERCHANT = {"merchantName": "Amazon IT", "merchantCategoryCode": "5399", "country": "MT"}


@BOTH
async def test_a_prepaid_purchase_shows_its_authorisation_and_settlement(client, programme, base):
    p = await programme()
    ident, acc, card = await funded_card(client, p)
    assert (await move(client, ident, body(p, acc, card, 1000))).status_code == 200
    code = await simulated(client, p, f"{card['id']}/purchase", buy(100))
    assert code["code"] == "APPROVED", code
    fee = 10  # a new programme's purchase fee (D19)
    settled, authorised, funded = await entries(client, ident, card["id"], base)
    assert settled["transactionId"] == {"type": "SETTLEMENT", "id": code["settlementId"]}
    assert settled["entryState"] == "COMPLETED"
    assert settled["transactionAmount"] == amount(-100)
    assert settled["availableBalanceAdjustment"] == amount(-fee)
    assert settled["actualBalanceAdjustment"] == amount(-(100 + fee))
    assert settled["cardholderFee"] == amount(fee)
    for field in ("balanceAfter", "availableBalanceAfter", "actualBalanceAfter"):
        assert settled[field] == amount(900 - fee), field
    assert merchant_of(settled) == EXPECTED_MERCHANT
    assert settled["additionalFields"]["merchantTransactionType"] == "SALE_PURCHASE"
    assert settled["additionalFields"]["authorisationRelatedId"] == code["authorisationId"]
    assert len(settled["additionalFields"]["authorisationCode"]) == 6

    assert authorised["transactionId"] == {"type": "AUTHORISATION", "id": code["authorisationId"]}
    assert authorised["entryState"] == "COMPLETED"
    assert authorised["transactionAmount"] == amount(-100)
    assert authorised["availableBalanceAdjustment"] == amount(-100)
    assert authorised["actualBalanceAdjustment"] == amount(0)
    assert authorised["cardholderFee"] == amount(0)
    assert (authorised["balanceAfter"], authorised["availableBalanceAfter"]) == (
        amount(900),
        amount(900),
    )
    assert authorised["actualBalanceAfter"] == amount(1000)
    assert authorised["additionalFields"]["authorisationState"] == "COMPLETED"
    assert authorised["additionalFields"]["forexPaddingAmount"] == "0"
    assert merchant_of(authorised) == EXPECTED_MERCHANT
    assert funded["transactionId"]["type"] == "TRANSFER"
    assert await held(client, ident, card) == (900 - fee, 900 - fee)

    r = await statement(client, ident, card["id"], base, {**ident.headers, "accept": "text/csv"})
    rows = list(csv.DictReader(io.StringIO(r.text)))
    types = [row["transactionId.type"] for row in rows]
    assert types == ["SETTLEMENT", "AUTHORISATION", "TRANSFER"]
    assert rows[1]["additionalFields.authorisationState"] == "COMPLETED"


async def test_a_held_authorisation_then_its_expiry_and_a_merchant_refund(client, programme):
    p = await programme()
    ident, acc, card = await funded_card(client, p)
    assert (await move(client, ident, body(p, acc, card, 500))).status_code == 200
    code = await simulated(client, p, f"{card['id']}/authorise", buy(80))
    assert code["code"] == "APPROVED", code
    auth = code["authorisationId"]
    [pending, _] = await entries(client, ident, card["id"])
    assert pending["transactionId"] == {"type": "AUTHORISATION", "id": auth}
    assert pending["entryState"] == "PENDING"
    assert pending["additionalFields"]["authorisationState"] == "PENDING_SETTLEMENT"
    assert (pending["balanceAfter"], pending["actualBalanceAfter"]) == (amount(420), amount(500))
    assert await held(client, ident, card) == (420, 500)

    code = await simulated(client, p, f"{card['id']}/authorisations/{auth}/expire")
    [expired, authorised, _] = await entries(client, ident, card["id"])
    assert expired["transactionId"]["type"] == "AUTHORISATION_EXPIRY"
    assert expired["availableBalanceAdjustment"] == amount(80)
    assert expired["actualBalanceAdjustment"] == amount(0)
    assert expired["balanceAfter"] == amount(500)
    assert authorised["entryState"] == "COMPLETED"
    assert authorised["additionalFields"]["authorisationState"] == "EXPIRED"

    code = await simulated(client, p, f"{card['id']}/merchant_refund", buy(40))
    got = await entries(client, ident, card["id"])
    refunded = got[0]
    assert refunded["transactionId"]["type"] == "MERCHANT_REFUND"
    assert refunded["transactionAmount"] == amount(40)
    assert refunded["additionalFields"]["merchantTransactionType"] == "PURCHASE_REFUND"
    assert "authorisationRelatedId" not in refunded["additionalFields"]
    assert [e["transactionId"]["type"] for e in got[1:4]] == [
        "SETTLEMENT",
        "AUTHORISATION",
        "AUTHORISATION_EXPIRY",
    ]
    available, actual = await held(client, ident, card)
    assert available == actual == refunded["balanceAfter"]["amount"]


async def test_a_debit_cards_steps_on_its_statement_and_its_parents(client, programme):
    p = await programme()
    ident = await verified(client, p, "corporates")
    parent = ref(ACCOUNTS, (await open_account(client, ident, EUR, friendlyName="Main"))["id"])
    assert await deposit(client, p, parent["id"], 1000) == "COMPLETED"
    card = await debit_card(client, ident, parent)
    other = await debit_card(client, ident, parent)
    for c in (card, other):
        r = await client.put(
            f"/multi/managed_cards/{c['id']}/spend_rules",
            headers=ident.headers,
            json={"spendLimit": [{"value": amount(10_000), "interval": "ALWAYS"}]},
        )
        assert r.status_code == 200, r.text
    r = await statement(client, ident, card["id"])
    assert r.json() == {"entry": [], "count": 0, "responseCount": 0}  # not the parent's deposit

    code = await simulated(client, p, f"{card['id']}/purchase", buy(100))
    assert code["code"] == "APPROVED", code
    held_code = await simulated(client, p, f"{other['id']}/authorise", buy(30))
    assert held_code["code"] == "APPROVED", held_code
    settlement, auth = code["settlementId"], code["authorisationId"]
    other_auth = held_code["authorisationId"]

    got = await entries(client, ident, card["id"])
    assert [e["transactionId"]["id"] for e in got] == [settlement, auth]  # not the other card's
    for e in got:
        for field in ("balanceAfter", "availableBalanceAfter", "actualBalanceAfter"):
            assert field not in e, e  # a debit card holds no balance
        assert "relatedCardId" not in e["additionalFields"]
    assert got[0]["actualBalanceAdjustment"] == amount(-110)
    assert got[1]["additionalFields"]["authorisationState"] == "COMPLETED"
    assert (await statement(client, ident, card["id"], limit=1)).json()["count"] == 2
    r = await statement(client, ident, card["id"], headers={**ident.headers, "accept": "text/csv"})
    rows = list(csv.DictReader(io.StringIO(r.text)))
    assert [row["balanceAfter.amount"] for row in rows] == ["", ""]
    r = await statement(
        client, ident, card["id"], headers={**ident.headers, "accept": "application/pdf"}
    )
    assert r.status_code == 200 and r.content.startswith(b"%PDF")
    [pending] = await entries(client, ident, other["id"])
    assert pending["entryState"] == "PENDING"
    assert pending["additionalFields"]["authorisationState"] == "PENDING_SETTLEMENT"

    r = await client.get(f"/multi/managed_accounts/{parent['id']}/statement", headers=ident.headers)
    on_parent = {e["transactionId"]["id"]: e for e in r.json()["entry"]}
    for tx_id, card_id in ((settlement, card["id"]), (auth, card["id"]), (other_auth, other["id"])):
        assert on_parent[tx_id]["additionalFields"]["relatedCardId"] == card_id
    assert merchant_of(on_parent[settlement]) == EXPECTED_MERCHANT
    assert on_parent[other_auth]["entryState"] == "PENDING"
    # A card step's balanceAfter is the available balance (D23): 1000 - 110 - 30 held.
    assert on_parent[other_auth]["balanceAfter"] == amount(860)
    assert on_parent[other_auth]["actualBalanceAfter"] == amount(890)
    assert await held(client, ident, parent) == (860, 890)


async def test_a_reversed_authorisation(client, programme):
    p = await programme()
    ident, acc, card = await funded_card(client, p)
    assert (await move(client, ident, body(p, acc, card, 300))).status_code == 200
    code = await simulated(client, p, f"{card['id']}/authorise", buy(50))
    assert code["code"] == "APPROVED", code
    auth = code["authorisationId"]
    code = await simulated(client, p, f"{card['id']}/authorisations/{auth}/reverse")
    reversed_, authorised, _ = await entries(client, ident, card["id"])
    assert reversed_["transactionId"]["type"] == "AUTHORISATION_REVERSAL"
    assert reversed_["availableBalanceAdjustment"] == amount(50)
    assert reversed_["actualBalanceAdjustment"] == amount(0)
    assert reversed_["balanceAfter"] == amount(300)
    assert authorised["transactionId"]["id"] == auth
    assert authorised["entryState"] == "COMPLETED"
    assert authorised["additionalFields"]["authorisationState"] == "REVERSED"
    assert await held(client, ident, card) == (300, 300)
