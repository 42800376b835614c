"""The official demo web app's card screens, with the requests its API layer sends and the
fields (and types) its pages read, as tests/api/test_demo_app.py does for its account and
transfer screens.

What the app does (its `ManagedCardsApi`, `store/cards.ts` and the `managed-cards` pages):
- the add-card page posts `profileId, friendlyName, nameOnCard, cardholderMobileNumber,
  billingAddress, mode, currency`: always `PREPAID_MODE` (its create request has no
  `parentManagedAccountId`, so it cannot make a debit card), the identity's base currency, the
  identity's address as billing address, a consumer's name and mobile from its root user;
- the cards page lists with a `state` filter, then asks `state=DESTROYED&limit=1&offset=0` to
  decide whether to offer the "show destroyed cards" switch; it sums `balances.availableBalance`;
- a card tile reads `id`, `state.state`, `friendlyName`, `cardNumberLastFour`, `nameOnCard`,
  `expiryMmyy` (cut in two-character pieces), `currency` and `balances.availableBalance`;
- the card page passes `cardNumber.value` and `cvv.value` as tokens to Weavr's secure display
  components (never a number in clear) and builds its month filter from `creationTimestamp`;
- the edit page reads `friendlyName` and `cardholderMobileNumber` (parsed as an international
  number) and patches `friendlyName` (and, for a corporate, `cardholderMobileNumber`);
- freeze, unfreeze and delete post to `block`, `unblock` and `remove` without a body; delete
  first transfers a non-zero balance back to the first active account;
- "add funds" opens the transfer page, which transfers from an account to the card;
- the statement page asks for this month (`fromTimestamp`/`toTimestamp` in ms, `DESC`, 100 a
  page, `showFundMovementsOnly=false`), hides reversals, expiries, declines and completed
  authorisations, and prints every shown row's `cardholderFee`; download asks for `text/csv`.
"""

from __future__ import annotations

import csv
import io
import re
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.api.test_demo_app import (
    SIM,
    App,
    accounts_and_statement,
    digits,
    register,
    verify_identity,
)

MMYY = re.compile(r"^(0[1-9]|1[0-2])[0-9]{2}$")
E164 = re.compile(r"^\+[1-9][0-9]{6,14}$")
PROFILE = {"corporates": "corporatePrepaidManagedCard", "consumers": "consumerPrepaidManagedCard"}


def tile(card: dict[str, Any]) -> dict[str, Any]:
    """What a card tile (`CardComponent`) and the card page show, with the types they need."""
    assert digits(card["id"])
    assert card["state"]["state"] in ("ACTIVE", "BLOCKED", "DESTROYED")
    assert isinstance(card["friendlyName"], str) and isinstance(card["nameOnCard"], str)
    assert isinstance(card["cardNumberLastFour"], str) and len(card["cardNumberLastFour"]) == 4
    assert isinstance(card["expiryMmyy"], str) and MMYY.match(card["expiryMmyy"])
    assert isinstance(card["currency"], str) and len(card["currency"]) == 3
    assert isinstance(card["creationTimestamp"], int)
    assert isinstance(card["cardholderMobileNumber"], str)
    assert E164.match(card["cardholderMobileNumber"]), card["cardholderMobileNumber"]
    # The secure display components take tokens: a string that is not the card number.
    for field in ("cardNumber", "cvv"):
        token = card[field]["value"]
        assert isinstance(token, str) and token and not token.isdigit()
    balances = card["balances"]
    assert isinstance(balances["availableBalance"], int)
    assert isinstance(balances["actualBalance"], int)
    return {
        "name": card["friendlyName"],
        "number": f"•••• {card['cardNumberLastFour']}",
        "expiry": "/".join(re.findall(".{1,2}", card["expiryMmyy"])),
        "balance": balances["availableBalance"],
        "frozen": card["state"]["state"] == "BLOCKED",
        "destroyed": card["state"]["state"] == "DESTROYED",
    }


async def address_page(app: App, kind: str) -> dict[str, Any]:
    """The registration's address page: the consumer's address, or the company's business
    address, with a post code (a card's billing address needs one)."""
    address = {
        "addressLine1": "3 Republic Street",
        "addressLine2": "Flat 4",
        "city": "Valletta",
        "postCode": "VLT 1117",
        "country": "MT",
    }
    if kind == "consumers":
        await app.call("PATCH", "/consumers", json={"address": address})
        return (await app.call("GET", "/consumers")).json()
    await app.call("PATCH", "/corporates", json={"companyBusinessAddress": address})
    return (await app.call("GET", "/corporates")).json()


async def add_card(app: App, kind: str, me: dict[str, Any], name: str) -> dict[str, Any]:
    """The add-card page's request, built as the page builds it."""
    root = me["rootUser"]
    if kind == "consumers":
        name_on_card = f"{root['name']} {root['surname']}"
        mobile = root["mobile"]["countryCode"] + root["mobile"]["number"]
        address = root["address"]
    else:
        name_on_card = "Ada Lovelace"  # typed in; the phone input gives "+" + calling code
        mobile = "+" + "44" + "7700900123"
        address = me["company"]["businessAddress"]
    body = {
        "profileId": app.p.profiles[PROFILE[kind]],
        "friendlyName": name,
        "nameOnCard": name_on_card,
        "cardholderMobileNumber": mobile,
        "billingAddress": address,
        "mode": "PREPAID_MODE",
        "currency": me["baseCurrency"],
    }
    card = (await app.call("POST", "/managed_cards", json=body)).json()
    tile(card)
    assert card["friendlyName"] == name and card["nameOnCard"] == name_on_card
    assert card["currency"] == me["baseCurrency"] and card["mode"] == "PREPAID_MODE"
    assert card["state"]["state"] == "ACTIVE"
    assert card["balances"] == {"availableBalance": 0, "actualBalance": 0}
    return card


async def cards_page(app: App, states: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """The cards page: the list, each tile, the total balance, and the destroyed-cards switch."""
    page = (await app.call("GET", "/managed_cards", params=states)).json()
    cards = page["cards"]
    assert isinstance(cards, list)
    assert page["count"] == len(cards) and page["responseCount"] == len(cards)
    for card in cards:
        tile(card)
    return cards


async def has_destroyed_cards(app: App) -> bool:
    """`hasDestroyedCards`: the switch shows when this one-card page is not empty."""
    params = {"state": "DESTROYED", "limit": 1, "offset": 0}
    page = (await app.call("GET", "/managed_cards", params=params)).json()
    assert page["responseCount"] == len(page["cards"]) <= 1
    return bool(page["cards"])


async def secure_display(app: App, card: dict[str, Any]) -> tuple[str, str]:
    """The card page's number and CVV: the app hands the user's token to the secure display
    components (`$weavrSetUserToken`) with each field's token; the sandbox's secure session is
    what shows the values."""
    shown = []
    for field, kind in (("cardNumber", "CARD_NUMBER"), ("cvv", "CVV")):
        r = await app.client.post(
            f"{SIM}/secure_session/detokenize",
            headers={"programme-key": app.p.api_key, "Authorization": f"Bearer {app.token}"},
            json={"token": card[field]["value"], "field": kind},
        )
        assert r.status_code == 200, r.text
        shown.append(r.json()["value"])
    number, cvv = shown
    assert number.isdigit() and len(number) == 16 and cvv.isdigit() and len(cvv) == 3
    assert number.startswith(card["cardNumberFirstSix"])
    assert number.endswith(card["cardNumberLastFour"])
    return number, cvv


# The cards page asks for `state=ACTIVE,BLOCKED` in one value; the server takes an array filter
# as repeated keys (cards.md §3.2), so the journey asks that way (see the xfail test below).
LIVE = [("state", "ACTIVE"), ("state", "BLOCKED")]


async def edit_page(app: App, kind: str, card_id: str, name: str) -> dict[str, Any]:
    """The edit page: read the card, then patch its name (a corporate also sends the number the
    phone input formats; a consumer's page has no phone input)."""
    card = (await app.call("GET", f"/managed_cards/{card_id}")).json()
    tile(card)
    body: dict[str, Any] = {"friendlyName": name}
    if kind == "corporates":
        body["cardholderMobileNumber"] = "+35699123456"
    updated = (await app.call("PATCH", f"/managed_cards/{card_id}", json=body)).json()
    tile(updated)
    assert updated["friendlyName"] == name
    assert updated["id"] == card_id and updated["cardNumberLastFour"] == card["cardNumberLastFour"]
    if kind == "corporates":
        assert updated["cardholderMobileNumber"] == "+35699123456"
    else:
        assert updated["cardholderMobileNumber"] == card["cardholderMobileNumber"]
    return updated


@pytest.mark.parametrize("kind", ["corporates", "consumers"])
async def test_add_list_edit_freeze_and_delete_cards(client, programme, kind):
    app = App(client, await programme())
    created = await register(app, kind)
    me = await address_page(app, kind)
    await verify_identity(app, kind, created)

    assert await cards_page(app, LIVE) == []
    assert await has_destroyed_cards(app) is False

    first = await add_card(app, kind, me, "Groceries")
    second = await add_card(app, kind, me, "Travel")
    assert first["billingAddress"]["postCode"] == "VLT 1117"
    listed = await cards_page(app, LIVE)
    assert {c["id"] for c in listed} == {first["id"], second["id"]}
    assert {c["currency"] for c in listed} == {me["baseCurrency"]}
    assert sum(c["balances"]["availableBalance"] for c in listed) == 0

    # The card page: the same card as the list shows, tokens included.
    shown = (await app.call("GET", f"/managed_cards/{first['id']}")).json()
    assert shown == next(c for c in listed if c["id"] == first["id"])
    number, _ = await secure_display(app, shown)
    assert number != (await secure_display(app, second))[0]

    renamed = await edit_page(app, kind, first["id"], "Food")
    assert tile(renamed)["name"] == "Food"

    # Freeze and unfreeze from the tile's menu: the tile follows the state.
    await app.call("POST", f"/managed_cards/{first['id']}/block", 204)
    tiles = {c["id"]: tile(c) for c in await cards_page(app, LIVE)}
    assert tiles[first["id"]]["frozen"] is True and tiles[second["id"]]["frozen"] is False
    r = await app.call("POST", f"/managed_cards/{first['id']}/block", 409)
    assert isinstance(r.json()["errorCode"], str)  # the toast shows `message` or `errorCode`
    await app.call("POST", f"/managed_cards/{first['id']}/unblock", 204)
    tiles = {c["id"]: tile(c) for c in await cards_page(app, LIVE)}
    assert tiles[first["id"]]["frozen"] is False

    # Delete from the card page: an empty card is removed at once (no transfer back first).
    assert shown["balances"]["availableBalance"] == 0
    await app.call("POST", f"/managed_cards/{second['id']}/remove", 204)
    assert [c["id"] for c in await cards_page(app, LIVE)] == [first["id"]]
    assert await has_destroyed_cards(app) is True
    everything = {c["id"]: tile(c) for c in await cards_page(app, [])}
    assert everything[second["id"]]["destroyed"] is True
    assert everything[first["id"]]["destroyed"] is False
    gone = (await app.call("GET", f"/managed_cards/{second['id']}")).json()
    assert gone["state"]["state"] == "DESTROYED"


async def test_a_consumers_edit_page_sends_its_phone_input_object_and_is_refused(client, programme):
    """The consumer's edit page has no phone input, yet its request keeps the input's model
    object as `cardholderMobileNumber`; the field is a string, so the answer is a 400 naming it
    (the page shows its error toast) and the card keeps its name."""
    app = App(client, await programme())
    created = await register(app, "consumers")
    me = await address_page(app, "consumers")
    await verify_identity(app, "consumers", created)
    card = await add_card(app, "consumers", me, "Groceries")
    body = {
        "friendlyName": "Food",
        "cardholderMobileNumber": {"countryCode": "MT", "cardholderMobileNumber": "79000000"},
    }
    r = await app.call("PATCH", f"/managed_cards/{card['id']}", 400, json=body)
    fields = [f["fieldName"] for f in r.json()["syntaxErrors"]["invalidFields"]]
    assert fields == ["cardholderMobileNumber"]
    assert (await app.call("GET", f"/managed_cards/{card['id']}")).json()["friendlyName"] == (
        "Groceries"
    )


async def test_the_cards_page_state_filter_as_the_app_sends_it(client, programme):
    app = App(client, await programme())
    created = await register(app, "corporates")
    me = await address_page(app, "corporates")
    await verify_identity(app, "corporates", created)
    kept = await add_card(app, "corporates", me, "Groceries")
    removed = await add_card(app, "corporates", me, "Travel")
    await app.call("POST", f"/managed_cards/{removed['id']}/remove", 204)
    live = await cards_page(app, [("state", "ACTIVE,BLOCKED")])
    assert [c["id"] for c in live] == [kept["id"]]
    every = await cards_page(app, [("state", "")])
    assert {c["id"] for c in every} == {kept["id"], removed["id"]}


def month(ms: int) -> tuple[int, int]:
    """Luxon's startOf('month') and endOf('month') of a timestamp, in milliseconds (UTC)."""
    start = datetime.fromtimestamp(ms / 1000, UTC).replace(
        day=1, hour=0, minute=0, second=0, microsecond=0
    )
    following = (start + timedelta(days=32)).replace(day=1)
    return int(start.timestamp() * 1000), int(following.timestamp() * 1000) - 1


def shown_rows(statement: dict[str, Any]) -> list[dict[str, Any]]:
    """`setFilteredStatement`: the rows the card page shows. It hides reversals, expiries and
    declines, and an authorisation once it has completed (its settlement shows instead)."""
    rows = []
    for entry in statement["entry"]:
        kind = (entry.get("txId") or entry["transactionId"])["type"]
        if kind in ("AUTHORISATION_REVERSAL", "AUTHORISATION_EXPIRY", "AUTHORISATION_DECLINE"):
            continue
        fields = entry.get("additionalFields") or {}
        if kind == "AUTHORISATION" and fields.get("authorisationState") == "COMPLETED":
            continue
        rows.append(entry)
    return rows


def row(entry: dict[str, Any]) -> dict[str, Any]:
    """What a shown row reads (`StatementItem` and its entry components), with the types they
    need: every one of these rows prints `cardholderFee` through `Intl.NumberFormat`, which
    throws without a currency."""
    kind = entry["transactionId"]["type"]
    assert isinstance(entry["processedTimestamp"], int)
    amount, fee = entry["transactionAmount"], entry["cardholderFee"]
    for money in (amount, fee):
        assert isinstance(money["currency"], str) and isinstance(money["amount"], int)
    fields = entry.get("additionalFields") or {}
    assert all(isinstance(v, str) for v in fields.values())
    shown: dict[str, Any] = {"type": kind, "amount": amount["amount"], "fee": fee["amount"]}
    if kind in ("AUTHORISATION", "SETTLEMENT", "MERCHANT_REFUND"):
        shown["merchant"] = fields["merchantName"]
        shown["country"] = fields.get("merchantTerminalCountry")
        shown["atm"] = fields.get("merchantTransactionType") == "CASH_WITHDRAWAL"
    if kind == "TRANSFER":
        shown["to"] = fields.get("destinationInstrumentFriendlyName")
        shown["from"] = fields.get("sourceInstrumentFriendlyName")
    return shown


async def top_up(app: App, kind: str, card_id: str, units: int) -> dict[str, Any]:
    """The transfer page opened from a card (`/transfer?destination=<card id>`): it loads the
    cards and the active accounts, the user picks an account (one with at least 10.00) and an
    amount in units, which the page sends in cents."""
    await app.call("GET", "/managed_cards")
    profile = "corporateManagedAccount" if kind == "corporates" else "consumerManagedAccount"
    params = {"profileId": app.p.profiles[profile], "state": "ACTIVE", "offset": "0"}
    accounts = (await app.call("GET", "/managed_accounts", params=params)).json()["accounts"]
    source = accounts[0]
    assert source["balances"]["availableBalance"] >= 1000  # else "Not enough funds."
    made = (
        await app.call(
            "POST",
            "/transfers",
            json={
                "profileId": app.p.profiles["transfers"],
                "source": {"type": "managed_accounts", "id": source["id"]},
                "destination": {"type": "managed_cards", "id": card_id},
                "destinationAmount": {"currency": source["currency"], "amount": units * 100},
            },
        )
    ).json()
    assert digits(made["id"]) and made["state"] == "COMPLETED"
    assert made["destination"] == {"type": "managed_cards", "id": card_id}
    return made


async def statement_page(app: App, card: dict[str, Any]) -> dict[str, Any]:
    """The card page's statement: this month, newest first, 100 a page, with the filter the
    app also sends to accounts."""
    start, _ = month(card["creationTimestamp"])
    _, end = month(int(time.time() * 1000))
    params = {
        "showFundMovementsOnly": "false",
        "orderByTimestamp": "DESC",
        "limit": 100,
        "offset": 0,
        "fromTimestamp": start,
        "toTimestamp": end,
    }
    r = await app.call("GET", f"/managed_cards/{card['id']}/statement", params=params)
    statement = r.json()
    assert isinstance(statement["entry"], list)
    assert statement["responseCount"] == len(statement["entry"])  # the infinite scroll's stop
    # The download button: the same filters, `Accept: text/csv`.
    r = await app.client.get(
        f"{app.base}/managed_cards/{card['id']}/statement",
        headers={**app.headers, "accept": "text/csv"},
        params=params,
    )
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
    assert len(list(csv.DictReader(io.StringIO(r.text)))) == len(statement["entry"])
    return statement


@pytest.mark.parametrize("kind", ["corporates", "consumers"])
async def test_top_up_a_card_buy_and_read_its_statement_then_delete_it(client, programme, kind):
    app = App(client, await programme())
    created = await register(app, kind)
    me = await address_page(app, kind)
    await verify_identity(app, kind, created)
    await accounts_and_statement(app, kind)  # an account "Main" holding 1500
    card = await add_card(app, kind, me, "Groceries")
    assert shown_rows(await statement_page(app, card)) == []

    made = await top_up(app, kind, card["id"], 10)
    # The account's statement names the card the money went to ("To Groceries").
    source = made["source"]["id"]
    entries = (await app.call("GET", f"/managed_accounts/{source}/statement")).json()["entry"]
    [out] = [e for e in entries if e["transactionId"] == {"type": "TRANSFER", "id": made["id"]}]
    assert row(out) == {
        "type": "TRANSFER",
        "amount": -1000,
        "fee": 0,
        "to": "Groceries",
        "from": None,
    }
    card = (await app.call("GET", f"/managed_cards/{card['id']}")).json()
    assert tile(card)["balance"] == 1000

    r = await app.sim(
        f"/cards/{card['id']}/purchase",
        {
            "merchantName": "Corner Shop",
            "merchantCategoryCode": "5411",
            "transactionAmount": {"currency": card["currency"], "amount": 250},
            "transactionCountry": "MLT",
        },
    )
    assert r.json()["code"] == "APPROVED"
    card = (await app.call("GET", f"/managed_cards/{card['id']}")).json()
    fee = 1000 - 250 - card["balances"]["availableBalance"]
    assert fee >= 0 and card["balances"]["actualBalance"] == 1000 - 250 - fee

    statement = await statement_page(app, card)
    kinds = [e["transactionId"]["type"] for e in statement["entry"]]
    assert kinds == ["SETTLEMENT", "AUTHORISATION", "TRANSFER"]
    assert [row(e) for e in shown_rows(statement)] == [
        {
            "type": "SETTLEMENT",
            "amount": -250,
            "fee": fee,
            "merchant": "Corner Shop",
            "country": "MT",
            "atm": False,
        },
        {"type": "TRANSFER", "amount": 1000, "fee": 0, "to": None, "from": "Main"},
    ]
    transfer = statement["entry"][2]
    assert transfer["transactionId"] == {"type": "TRANSFER", "id": made["id"]}

    # A held authorisation shows (with the page's "Pending" badge); once reversed, the
    # reversal row is hidden and the authorisation no longer reads as pending-settlement.
    purchase = {
        "merchantName": "Fuel Stop",
        "transactionAmount": {"currency": card["currency"], "amount": 100},
        "transactionCountry": "MLT",
    }
    held = (await app.sim(f"/cards/{card['id']}/authorise", purchase)).json()
    assert held["code"] == "APPROVED"
    statement = await statement_page(app, card)
    pending = shown_rows(statement)[0]
    assert pending["transactionId"] == {"type": "AUTHORISATION", "id": held["authorisationId"]}
    assert pending["additionalFields"]["authorisationState"] != "COMPLETED"
    assert row(pending) == {
        "type": "AUTHORISATION",
        "amount": -100,
        "fee": 0,
        "merchant": "Fuel Stop",
        "country": "MT",
        "atm": False,
    }
    auth = held["authorisationId"]
    r = await app.sim(f"/cards/{card['id']}/authorisations/{auth}/reverse")
    assert r.json()["code"] == "COMPLETED"
    statement = await statement_page(app, card)
    kinds = [e["transactionId"]["type"] for e in statement["entry"]]
    assert kinds[0] == "AUTHORISATION_REVERSAL"
    assert [e["transactionId"]["type"] for e in shown_rows(statement)] == [
        "AUTHORISATION",
        "SETTLEMENT",
        "TRANSFER",
    ]
    card = (await app.call("GET", f"/managed_cards/{card['id']}")).json()
    assert card["balances"]["availableBalance"] == 1000 - 250 - fee

    # Delete from the card page: the balance goes back to the first active account first.
    left = card["balances"]["availableBalance"]
    profile = "corporateManagedAccount" if kind == "corporates" else "consumerManagedAccount"
    params = {"profileId": app.p.profiles[profile], "state": "ACTIVE", "offset": "0"}
    account = (await app.call("GET", "/managed_accounts", params=params)).json()["accounts"][0]
    back = (
        await app.call(
            "POST",
            "/transfers",
            json={
                "profileId": app.p.profiles["transfers"],
                "source": {"type": "managed_cards", "id": card["id"]},
                "destination": {"type": "managed_accounts", "id": account["id"]},
                "destinationAmount": {"currency": card["currency"], "amount": left},
            },
        )
    ).json()
    assert back["state"] == "COMPLETED"
    await app.call("POST", f"/managed_cards/{card['id']}/remove", 204)
    assert await has_destroyed_cards(app) is True
    balances = (await app.call("GET", f"/managed_accounts/{account['id']}")).json()["balances"]
    assert balances["availableBalance"] == account["balances"]["availableBalance"] + left
