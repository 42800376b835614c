"""The operator's side of cards through the operator API (D24, D32): card profiles, card fees,
the programme's cards with masked numbers, SYSTEM block and unblock, and each card's
authorisations; every route admin-only, another programme's card unknown, and the full card
number in no answer."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from multibank.cards.models import ManagedCard
from multibank.ledger import service as ledger
from multibank.ledger.models import SETTLEMENT
from tests.api.test_managed_cards import LATEST, act, card_body, create, debit_card, get
from tests.api.test_portal import BAD_AUTH, assert_not_found
from tests.api.test_portal_web import browser, page  # noqa: F401 (the fixture)
from tests.api.test_webhooks import deliver, hooked  # noqa: F401 (the fixture)
from tests.factories import Identity, verified

PORTAL = "/portal/api/programmes"
SIM = "/simulate/api"
CARD_KINDS = {
    "corporatePrepaidManagedCard": ("CORPORATE", "PREPAID_MODE"),
    "corporateDebitManagedCard": ("CORPORATE", "DEBIT_MODE"),
    "consumerPrepaidManagedCard": ("CONSUMER", "PREPAID_MODE"),
    "consumerDebitManagedCard": ("CONSUMER", "DEBIT_MODE"),
}
DEFAULT_CARD_FEES = {
    "purchase": {"EUR": 10, "GBP": 10, "USD": 10},
    "refund": {"EUR": 0, "GBP": 0, "USD": 0},
    "atmWithdrawal": {"EUR": 0, "GBP": 0, "USD": 0},
}
STATE_CHANGE = "/hooks/managed_cards/state_change/watch"


async def operator(
    client: httpx.AsyncClient,
    admin: dict[str, str],
    method: str,
    path: str,
    json: Any = None,
    params: Any = None,
) -> httpx.Response:
    return await client.request(method, f"{PORTAL}{path}", headers=admin, json=json, params=params)


async def full_number(container: Any, card_id: str) -> str:
    """The card's number, decrypted from its stored form: the one thing no answer may hold."""
    async with container.db.transaction() as session:
        card = await session.get(ManagedCard, int(card_id))
        assert card is not None
        number: str = container.card_keyring.decrypt(card.number_encrypted, card.id)
    assert len(number) == 16 and number.isdigit()
    return number


def buy(amount: int, **over: Any) -> dict[str, Any]:
    return {
        "merchantName": "Corner Café",
        "transactionAmount": {"currency": "EUR", "amount": amount},
        **over,
    }


async def simulate(
    client: httpx.AsyncClient, p_key: str, path: str, body: dict[str, Any] | None = None
) -> dict[str, Any]:
    """One step of a card payment through the card simulator (D26)."""
    r = await client.post(f"{SIM}/cards/{path}", headers={"programme-key": p_key}, json=body)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    assert out["code"] in ("APPROVED", "COMPLETED"), out
    return out


async def fund(container: Any, p_id: str, card_id: str, amount: int) -> None:
    async with container.db.transaction() as session:
        settlement = await ledger.system_account(session, int(p_id), SETTLEMENT, "EUR", 0)
        await ledger.post(
            session,
            programme_id=int(p_id),
            type_="DEPOSIT",
            legs=[
                ledger.Leg(int(card_id), "EUR", amount, amount),
                ledger.Leg(settlement, "EUR", -amount, -amount, guarded=False),
            ],
            now_ms=container.clock.now_ms(),
        )


# Card profiles


async def test_card_profiles_list_the_four_profiles_and_their_settings(
    client, admin_headers, programme
):
    p = await programme()
    r = await operator(client, admin_headers, "GET", f"/{p.id}/card_profiles")
    assert r.status_code == 200, r.text
    got = {c["kind"]: c for c in r.json()}
    assert set(got) == set(CARD_KINDS)
    for kind, (identity_type, mode) in CARD_KINDS.items():
        assert got[kind] == {
            "id": p.profiles[kind],
            "kind": kind,
            "identityType": identity_type,
            "mode": mode,
            "currencies": ["EUR", "GBP", "USD"],
            "active": True,
            "cardBrand": "MASTERCARD",
            "bin": "555555",
            "expiryPeriodMonths": 36,
            "renewalType": "NO_RENEW",
            "authorisationExpiryDays": 7,
            "spendRules": {},
        }


async def test_a_card_profile_switched_off_refuses_new_cards(client, admin_headers, programme):
    p = await programme()
    ident = await verified(client, p)
    prof = p.profiles["corporatePrepaidManagedCard"]
    r = await operator(
        client, admin_headers, "PATCH", f"/{p.id}/profiles/{prof}", json={"active": False}
    )
    assert r.status_code == 200, r.text
    r = await operator(client, admin_headers, "GET", f"/{p.id}/card_profiles")
    assert {c["kind"]: c["active"] for c in r.json()}["corporatePrepaidManagedCard"] is False
    r = await client.post(f"{LATEST}/managed_cards", headers=ident.headers, json=card_body(ident))
    assert r.status_code == 409 and r.json()["errorCode"] == "PROFILE_INACTIVE"
    r = await operator(
        client, admin_headers, "PATCH", f"/{p.id}/profiles/{prof}", json={"currencies": ["EUR"]}
    )
    assert r.status_code == 200 and r.json()["currencies"] == ["EUR"]


# Card fees


async def test_card_fees_get_and_put(client, admin_headers, programme):
    p = await programme()
    r = await operator(client, admin_headers, "GET", f"/{p.id}/card_fees")
    assert r.status_code == 200, r.text
    assert r.json() == DEFAULT_CARD_FEES
    r = await operator(
        client,
        admin_headers,
        "PUT",
        f"/{p.id}/card_fees",
        json={"purchase": {"GBP": 25}, "atmWithdrawal": {"EUR": 150, "USD": 0}},
    )
    assert r.status_code == 200, r.text
    expected = {
        "purchase": {"EUR": 10, "GBP": 25, "USD": 10},
        "refund": {"EUR": 0, "GBP": 0, "USD": 0},
        "atmWithdrawal": {"EUR": 150, "GBP": 0, "USD": 0},
    }
    assert r.json() == expected
    assert (await operator(client, admin_headers, "GET", f"/{p.id}/card_fees")).json() == expected
    summary = (await operator(client, admin_headers, "GET", f"/{p.id}/summary")).json()
    assert summary["cardFees"] == expected


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ({"purchase": {"CHF": 5}}, 409, "CURRENCY_NOT_SUPPORTED_BY_PROFILE"),
        ({"purchase": {"EUR": -1}}, 400, "purchase.EUR"),
        ({"cashback": {"EUR": 1}}, 400, "cashback"),
        ({"refund": {"eur": 1}}, 400, "refund"),
        ({"refund": {"EUR": "ten"}}, 400, "refund.EUR"),
    ],
)
async def test_card_fee_refusals_change_nothing(
    client, admin_headers, programme, body, status, says
):
    p = await programme()
    r = await operator(client, admin_headers, "PUT", f"/{p.id}/card_fees", json=body)
    assert r.status_code == status, r.text
    if status == 409:
        assert r.json()["errorCode"] == says
    else:
        fields = [f["fieldName"] for f in r.json()["syntaxErrors"]["invalidFields"]]
        assert any(says in f for f in fields), fields
    r = await operator(client, admin_headers, "GET", f"/{p.id}/card_fees")
    assert r.json() == DEFAULT_CARD_FEES


# Cards: lists, one card, masked numbers


async def test_card_lists_per_programme_and_per_identity(
    client, admin_headers, programme, container
):
    p = await programme()
    ada = await verified(client, p)
    bob = await verified(client, p, "consumers")
    first = await create(client, ada)
    second = await debit_card(client, ada)
    third = await create(client, bob)
    await fund(container, p.id, first["id"], 700)

    r = await operator(client, admin_headers, "GET", f"/{p.id}/managed_cards")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["count"] == 3
    assert [c["id"] for c in body["cards"]] == [third["id"], second["id"], first["id"]]
    by_id = {c["id"]: c for c in body["cards"]}
    prepaid = by_id[first["id"]]
    assert prepaid["identity"] == {"type": "CORPORATE", "id": ada.id}
    assert prepaid["mode"] == "PREPAID_MODE" and prepaid["state"] == {"state": "ACTIVE"}
    assert prepaid["balances"] == {"availableBalance": 700, "actualBalance": 700}
    assert prepaid["maskedCardNumber"] == (
        f"{first['cardNumberFirstSix']}******{first['cardNumberLastFour']}"
    )
    debit = by_id[second["id"]]
    assert debit["mode"] == "DEBIT_MODE"
    assert debit["parentManagedAccountId"] == second["parentManagedAccountId"]
    assert debit["balances"] == {"availableBalance": 0, "actualBalance": 0}
    assert by_id[third["id"]]["identity"] == {"type": "CONSUMER", "id": bob.id}

    r = await operator(
        client, admin_headers, "GET", f"/{p.id}/managed_cards", params={"identityId": ada.id}
    )
    assert r.json()["count"] == 2
    assert [c["id"] for c in r.json()["cards"]] == [second["id"], first["id"]]
    r = await operator(
        client, admin_headers, "GET", f"/{p.id}/managed_cards", params={"identityId": "1"}
    )
    assert r.json() == {"cards": [], "count": 0}
    r = await operator(
        client,
        admin_headers,
        "GET",
        f"/{p.id}/managed_cards",
        params={"limit": 1, "offset": 1},
    )
    assert r.json()["count"] == 3 and [c["id"] for c in r.json()["cards"]] == [second["id"]]
    r = await operator(
        client, admin_headers, "GET", f"/{p.id}/managed_cards", params={"state": "BLOCKED"}
    )
    assert r.json()["count"] == 0
    r = await operator(
        client, admin_headers, "GET", f"/{p.id}/managed_cards", params={"state": "LOST"}
    )
    assert r.status_code == 400, r.text

    r = await operator(client, admin_headers, "GET", f"/{p.id}/managed_cards/{first['id']}")
    assert r.status_code == 200, r.text
    assert r.json() == prepaid


async def test_no_portal_answer_holds_a_full_card_number(
    client, admin_headers, programme, container
):
    p = await programme()
    ident = await verified(client, p)
    cards = [await create(client, ident), await debit_card(client, ident)]
    numbers = [await full_number(container, c["id"]) for c in cards]
    await fund(container, p.id, cards[0]["id"], 500)
    await simulate(client, p.api_key, f"{cards[0]['id']}/authorise", buy(100))
    answers = []
    for path in (
        f"/{p.id}/managed_cards",
        f"/{p.id}/managed_cards?identityId={ident.id}",
        *(f"/{p.id}/managed_cards/{c['id']}" for c in cards),
        *(f"/{p.id}/managed_cards/{c['id']}/authorisations" for c in cards),
    ):
        r = await operator(client, admin_headers, "GET", path)
        assert r.status_code == 200, (path, r.text)
        answers.append(r.text)
    for number in numbers:
        for text in answers:
            assert number not in text
        masked = f"{number[:6]}******{number[-4:]}"
        assert any(masked in text for text in answers)


# SYSTEM block and unblock (D24)


async def test_a_system_block_cannot_be_lifted_by_the_user(client, admin_headers, programme):
    p = await programme()
    ident = await verified(client, p)
    card = await create(client, ident)
    base = f"/{p.id}/managed_cards/{card['id']}"
    r = await operator(client, admin_headers, "POST", f"{base}/block")
    assert r.status_code == 204, r.text
    assert (await get(client, ident, card["id"]))["state"] == {
        "state": "BLOCKED",
        "blockedReason": "SYSTEM",
    }
    r = await act(client, ident, card["id"], "unblock")
    assert r.status_code == 409 and r.json()["errorCode"] == "INSTRUMENT_INACTIVE"
    # A second SYSTEM block is refused as the user's is.
    r = await operator(client, admin_headers, "POST", f"{base}/block")
    assert r.status_code == 409 and r.json()["errorCode"] == "INSTRUMENT_ALREADY_BLOCKED"
    # The user may not block over it either (already blocked).
    r = await act(client, ident, card["id"], "block")
    assert r.status_code == 409 and r.json()["errorCode"] == "INSTRUMENT_ALREADY_BLOCKED"
    seen = await operator(client, admin_headers, "GET", base)
    assert seen.json()["state"] == {"state": "BLOCKED", "blockedReason": "SYSTEM"}

    r = await operator(client, admin_headers, "POST", f"{base}/unblock")
    assert r.status_code == 204, r.text
    assert (await get(client, ident, card["id"]))["state"] == {"state": "ACTIVE"}
    r = await operator(client, admin_headers, "POST", f"{base}/unblock")
    assert r.status_code == 409 and r.json()["errorCode"] == "INSTRUMENT_NOT_BLOCKED"


async def test_a_system_block_over_a_users_block_and_the_operators_unblock(
    client, admin_headers, programme
):
    p = await programme()
    ident = await verified(client, p)
    card = await create(client, ident)
    base = f"/{p.id}/managed_cards/{card['id']}"
    assert (await act(client, ident, card["id"], "block")).status_code == 204
    # The operator does not lift the user's own block.
    r = await operator(client, admin_headers, "POST", f"{base}/unblock")
    assert r.status_code == 409 and r.json()["errorCode"] == "INSTRUMENT_NOT_BLOCKED"
    assert (await get(client, ident, card["id"]))["state"]["blockedReason"] == "USER"
    # A SYSTEM block over it takes over: the user can no longer unblock.
    assert (await operator(client, admin_headers, "POST", f"{base}/block")).status_code == 204
    assert (await get(client, ident, card["id"]))["state"]["blockedReason"] == "SYSTEM"
    r = await act(client, ident, card["id"], "unblock")
    assert r.status_code == 409 and r.json()["errorCode"] == "INSTRUMENT_INACTIVE"
    assert (await operator(client, admin_headers, "POST", f"{base}/unblock")).status_code == 204
    assert (await get(client, ident, card["id"]))["state"] == {"state": "ACTIVE"}


async def test_a_removed_card_cannot_be_blocked_or_unblocked(client, admin_headers, programme):
    p = await programme()
    ident = await verified(client, p)
    card = await create(client, ident)
    assert (await act(client, ident, card["id"], "remove")).status_code == 204
    for action in ("block", "unblock"):
        r = await operator(
            client, admin_headers, "POST", f"/{p.id}/managed_cards/{card['id']}/{action}"
        )
        assert r.status_code == 409 and r.json()["errorCode"] == "INSTRUMENT_DESTROYED"


async def test_system_block_and_unblock_are_state_change_events(
    client,
    admin_headers,
    container,
    hooked,  # noqa: F811
):
    p, receiver = hooked
    ident = await verified(client, p)
    card = await create(client, ident)
    base = f"/{p.id}/managed_cards/{card['id']}"
    assert (await operator(client, admin_headers, "POST", f"{base}/block")).status_code == 204
    assert (await operator(client, admin_headers, "POST", f"{base}/unblock")).status_code == 204
    # Refused ones send nothing.
    assert (await operator(client, admin_headers, "POST", f"{base}/unblock")).status_code == 409
    await deliver(container)
    events = [r.json for r in receiver.received if r.path == STATE_CHANGE]
    assert [e["eventType"] for e in events] == ["BLOCKED", "UNBLOCKED"]
    assert events[0]["id"] == {"type": "managed_cards", "id": card["id"]}
    assert events[0]["state"] == {"state": "BLOCKED", "blockedReason": "SYSTEM"}
    assert events[1]["state"] == {"state": "ACTIVE"}


# Authorisations


async def test_a_cards_authorisations_with_their_state(client, admin_headers, programme, container):
    p = await programme()
    ident = await verified(client, p)
    card = await create(client, ident)
    other = await create(client, ident)
    for funded in (card, other):
        await fund(container, p.id, funded["id"], 1000)
    cid = card["id"]
    bought = await simulate(client, p.api_key, f"{cid}/purchase", buy(250, merchantId="M-1"))
    held = await simulate(client, p.api_key, f"{cid}/authorise", buy(100))
    reversed_ = await simulate(
        client, p.api_key, f"{cid}/authorisations/{held['authorisationId']}/reverse"
    )
    pending = await simulate(client, p.api_key, f"{cid}/authorise", buy(50))
    await simulate(client, p.api_key, f"{other['id']}/authorise", buy(70))

    r = await operator(client, admin_headers, "GET", f"/{p.id}/managed_cards/{cid}/authorisations")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["count"] == 3
    got = body["authorisations"]
    assert [(a["id"], a["state"]) for a in got] == [
        (pending["authorisationId"], "PENDING"),
        (held["authorisationId"], "REVERSED"),
        (bought["authorisationId"], "COMPLETED"),
    ]
    assert got[0]["steps"] == []
    assert [(s["id"], s["type"]) for s in got[1]["steps"]] == [
        (reversed_["reversalId"], "AUTHORISATION_REVERSAL")
    ]
    assert [(s["id"], s["type"]) for s in got[2]["steps"]] == [
        (bought["settlementId"], "SETTLEMENT")
    ]
    purchase = got[2]
    assert purchase["merchantName"] == "Corner Café" and purchase["merchantId"] == "M-1"
    assert purchase["merchantTerminalCountry"] == "MT"
    assert purchase["merchantTransactionType"] == "SALE_PURCHASE"
    assert purchase["transactionAmount"] == {"currency": "EUR", "amount": -250}
    assert len(purchase["authorisationCode"]) == 6 and purchase["authorisationCode"].isdigit()
    r = await operator(
        client,
        admin_headers,
        "GET",
        f"/{p.id}/managed_cards/{cid}/authorisations",
        params={"limit": 1, "offset": 2},
    )
    assert [a["id"] for a in r.json()["authorisations"]] == [bought["authorisationId"]]
    r = await operator(
        client, admin_headers, "GET", f"/{p.id}/managed_cards/{other['id']}/authorisations"
    )
    assert r.json()["count"] == 1
    # A SYSTEM-blocked card is declined at the merchant: no new authorisation is listed.
    assert (
        await operator(client, admin_headers, "POST", f"/{p.id}/managed_cards/{cid}/block")
    ).status_code == 204
    r = await client.post(
        f"{SIM}/cards/{cid}/authorise", headers={"programme-key": p.api_key}, json=buy(10)
    )
    assert r.status_code == 200 and r.json()["code"].startswith("DENIED"), r.text
    r = await operator(client, admin_headers, "GET", f"/{p.id}/managed_cards/{cid}/authorisations")
    assert r.json()["count"] == 3


# Refused callers


def card_routes(p_id: str, card_id: str) -> list[tuple[str, str, dict[str, Any] | None]]:
    card = f"/{p_id}/managed_cards/{card_id}"
    return [
        ("GET", f"/{p_id}/card_profiles", None),
        ("GET", f"/{p_id}/card_fees", None),
        ("PUT", f"/{p_id}/card_fees", {"purchase": {"EUR": 99}}),
        ("GET", f"/{p_id}/managed_cards", None),
        ("GET", card, None),
        ("GET", f"{card}/authorisations", None),
        ("POST", f"{card}/block", None),
        ("POST", f"{card}/unblock", None),
    ]


async def test_every_card_route_refuses_a_missing_or_wrong_admin_token(
    client, admin_headers, programme
):
    p = await programme()
    ident = await verified(client, p)
    card = await create(client, ident)
    wrong = []
    for method, path, body in card_routes(p.id, card["id"]):
        for label, headers in {**BAD_AUTH, "api-key": {"api-key": p.api_key}}.items():
            r = await client.request(method, f"{PORTAL}{path}", headers=headers, json=body)
            if r.status_code != 401 or r.content != b"":
                wrong.append(f"{label} {method} {path}: {r.status_code}")
    assert not wrong, "\n".join(wrong)
    # Nothing changed.
    assert (await get(client, ident, card["id"]))["state"] == {"state": "ACTIVE"}
    r = await operator(client, admin_headers, "GET", f"/{p.id}/card_fees")
    assert r.json() == DEFAULT_CARD_FEES


async def test_another_programmes_card_is_not_found(client, admin_headers, programme):
    mine = await programme()
    theirs = await programme()
    ident: Identity = await verified(client, theirs)
    card = await create(client, ident)
    for method, path, _ in card_routes(mine.id, card["id"])[4:]:
        assert_not_found(await operator(client, admin_headers, method, path))
    for unknown in ("1", str(2**63)):
        for method, path, _ in card_routes(theirs.id, unknown)[4:]:
            assert_not_found(await operator(client, admin_headers, method, path))
    r = await operator(
        client, admin_headers, "GET", f"/{mine.id}/managed_cards", params={"identityId": ident.id}
    )
    assert r.json() == {"cards": [], "count": 0}
    assert (await get(client, ident, card["id"]))["state"] == {"state": "ACTIVE"}
    # An unknown programme is 404 too.
    for method, path, body in card_routes("1", card["id"]):
        assert_not_found(await operator(client, admin_headers, method, path, json=body))


async def test_the_card_routes_are_in_the_operator_api_description(client):
    doc = (await client.get("/portal/api/openapi.json")).json()
    ops = {op["operationId"]: op for item in doc["paths"].values() for op in item.values()}
    for name in (
        "cardProfilesList",
        "cardFeesGet",
        "cardFeesUpdate",
        "operatorCardsList",
        "operatorCardGet",
        "operatorCardAuthorisations",
        "managedCardSystemBlock",
        "managedCardSystemUnblock",
    ):
        assert name in ops, name
    block = ops["managedCardSystemBlock"]["responses"]
    assert {"204", "401", "404", "409"} <= set(block)


async def test_an_unassigned_pool_card_is_listed_without_an_owner(
    browser,  # noqa: F811
    client,
    admin_headers,
    programme,
):
    p = await programme()
    r = await operator(
        client,
        admin_headers,
        "POST",
        f"/{p.id}/card_pool",
        json={"profileId": p.profiles["corporatePrepaidManagedCard"], "count": 1},
    )
    assert r.status_code == 201, r.text
    reference = r.json()["cards"][0]["externalReference"]
    r = await operator(client, admin_headers, "GET", f"/{p.id}/managed_cards")
    assert r.status_code == 200, r.text
    [card] = r.json()["cards"]
    assert card["identity"] is None and card["poolReference"] == reference
    assert card["maskedCardNumber"].startswith("555555******")
    listed = await page(browser, f"/portal/programmes/{p.id}/cards")
    assert "card pool" in listed
    shown = await page(browser, f"/portal/programmes/{p.id}/cards/{card['id']}")
    assert "in the card pool" in shown and reference in shown
