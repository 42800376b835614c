"""Physical cards, black-box over HTTP (cards.md §2.6, §3.9 to §3.13; D21, D25, D27, D28):
upgrade, activation, PIN, damaged / lost / stolen replacement and contactless reset on `/multi`
and `/3.29.1/multi` (3.1.0 has none), each documented 409 and 400, refused callers, step-up,
idempotent replays, the manufacturing steps on the programme clock and their webhooks."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from multibank.cards import manufacturing
from multibank.cards.models import ManagedCard
from multibank.ledger import service as ledger
from multibank.ledger.models import SETTLEMENT
from multibank.programmes import due
from multibank.programmes import service as programmes
from multibank.programmes.models import Programme
from tests.api.test_managed_cards import BASES, LATEST, SIM, act, create, debit_card, get
from tests.api.test_stepup_accounts import enrol_sms
from tests.api.test_webhooks import deliver, hooked  # noqa: F401 (the fixture)
from tests.api.webhook_support import signed_by
from tests.factories import Identity, login, otp_step_up, verified

ADDRESS = {
    "name": "Ada",
    "surname": "Lovelace",
    "addressLine1": "1 Analytical Street",
    "city": "Valletta",
    "postCode": "VLT 1000",
    "country": "MT",
}
CODE = "123456"


def upgrade_body(**over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"deliveryAddress": ADDRESS, "activationCode": CODE}
    body.update(over)
    return {k: v for k, v in body.items() if v is not None}


async def phys(
    client: httpx.AsyncClient,
    ident: Identity,
    card_id: str,
    op: str,
    body: dict[str, Any] | None = None,
    base: str = LATEST,
    method: str = "POST",
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    path = f"{base}/managed_cards/{card_id}/physical" + (f"/{op}" if op else "")
    headers = ident.headers if headers is None else headers
    return await client.request(method, path, headers=headers, json=body)


async def upgraded(
    client: httpx.AsyncClient, ident: Identity, base: str = LATEST, **over: Any
) -> dict[str, Any]:
    card = await create(client, ident, base)
    r = await phys(client, ident, card["id"], "", upgrade_body(**over), base)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


async def activated(client: httpx.AsyncClient, ident: Identity, **over: Any) -> dict[str, Any]:
    card = await upgraded(client, ident, **over)
    r = await phys(client, ident, card["id"], "activate", {"activationCode": CODE})
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def refused(r: httpx.Response, code: str) -> None:
    assert r.status_code == 409, r.text
    assert r.json()["errorCode"] == code, r.text


async def tokenize(client: httpx.AsyncClient, ident: Identity, value: str) -> str:
    r = await client.post(
        f"{SIM}/secure_session/tokenize",
        headers={"programme-key": ident.p.api_key, "Authorization": ident.headers["Authorization"]},
        json={"values": {"pin": {"value": value, "field": "PIN"}}},
    )
    assert r.status_code == 200, r.text
    token: str = r.json()["tokens"]["pin"]
    return token


async def detokenize(client: httpx.AsyncClient, ident: Identity, token: str, field: str) -> str:
    r = await client.post(
        f"{SIM}/secure_session/detokenize",
        headers={"programme-key": ident.p.api_key, "Authorization": ident.headers["Authorization"]},
        json={"token": token, "field": field},
    )
    assert r.status_code == 200, r.text
    value: str = r.json()["value"]
    return value


async def fund(container: Any, p: Any, card_id: str, amount: int) -> None:
    """Money onto a prepaid card as a deposit would put it, through the ledger's own posting
    (transfers to cards are another slice of issue 34)."""
    async with container.db.transaction() as session:
        settlement = await ledger.system_account(session, int(p.id), SETTLEMENT, "EUR", 0)
        await ledger.post(
            session,
            programme_id=int(p.id),
            type_="DEPOSIT",
            legs=[
                ledger.Leg(int(card_id), "EUR", amount, amount),
                ledger.Leg(settlement, "EUR", -amount, -amount, guarded=False),
            ],
            now_ms=container.clock.now_ms(),
        )


@pytest.mark.parametrize("base", BASES)
async def test_upgrade_activate_and_read_the_pin(client, programme, base):
    p = await programme()
    ident = await verified(client, p, "consumers", base)
    card = await create(client, ident, base)
    pin = await tokenize(client, ident, "4321")
    r = await phys(client, ident, card["id"], "", upgrade_body(pin={"value": pin}), base)
    assert r.status_code == 200, r.text
    up = r.json()
    assert up["id"] == card["id"] and up["type"] == "VIRTUAL"
    assert up["physicalCardDetails"] == {
        "productReference": "DEFAULT",
        "carrierType": "DEFAULT",
        "pendingActivation": True,
        "pinBlocked": False,
        "manufacturingState": "REQUESTED",
        "replacement": {"replacementId": "0"},
        "deliveryAddress": ADDRESS,
        "deliveryMethod": "STANDARD_DELIVERY",
    }
    assert await get(client, ident, card["id"], base) == up
    # Not activated yet: no PIN; the wrong code does not activate.
    refused(
        await phys(client, ident, card["id"], "pin", base=base, method="GET"),
        "PHYSICAL_CARD_NOT_ACTIVATED",
    )
    r = await phys(client, ident, card["id"], "activate", {"activationCode": "999999"}, base)
    refused(r, "ACTIVATION_CODE_INVALID")
    r = await phys(client, ident, card["id"], "activate", {"activationCode": CODE}, base)
    assert r.status_code == 200, r.text
    on = r.json()
    assert on["type"] == "PHYSICAL" and on["state"] == {"state": "ACTIVE"}
    assert on["physicalCardDetails"]["pendingActivation"] is False
    assert on["physicalCardDetails"]["manufacturingState"] == "DELIVERED"
    refused(
        await phys(client, ident, card["id"], "activate", {"activationCode": CODE}, base),
        "INSTRUMENT_ALREADY_ACTIVATED",
    )
    r = await phys(client, ident, card["id"], "pin", base=base, method="GET")
    assert r.status_code == 200, r.text
    token = r.json()["pin"]["value"]
    assert token != "4321" and not token.isdigit()
    assert await detokenize(client, ident, token, "PIN") == "4321"
    refused(
        await phys(client, ident, card["id"], "", upgrade_body(), base),
        "INSTRUMENT_ALREADY_UPGRADED_TO_PHYSICAL",
    )
    # Listed by manufacturing state.
    r = await client.get(
        f"{base}/managed_cards", headers=ident.headers, params={"manufacturingState": "DELIVERED"}
    )
    assert [c["id"] for c in r.json()["cards"]] == [card["id"]]


async def test_without_a_pin_token_a_random_pin_is_drawn(client, programme):
    p = await programme()
    ident = await verified(client, p)
    card = await activated(client, ident)
    r = await phys(client, ident, card["id"], "pin", method="GET")
    pin = await detokenize(client, ident, r.json()["pin"]["value"], "PIN")
    assert len(pin) == 4 and pin.isdigit()


async def test_upgrade_refusals(client, programme):
    p = await programme()
    ident = await verified(client, p)
    card = await create(client, ident)
    cid = card["id"]
    no_address = {"activationCode": CODE}
    bad_bodies = [
        no_address,
        {"deliveryAddress": ADDRESS},
        upgrade_body(activationCode="12a456"),
        upgrade_body(activationCode="1234567"),
        upgrade_body(pin={"value": "123"}),
        upgrade_body(pin={"value": "x" * 25}),
        upgrade_body(deliveryMethod="PIGEON"),
        upgrade_body(deliveryAddress={**ADDRESS, "city": ""}),
    ]
    for body in bad_bodies:
        r = await phys(client, ident, cid, "", body)
        assert r.status_code == 400, (body, r.text)
    r = await phys(client, ident, cid, "", upgrade_body(pin={"value": "NoSuchToken1"}))
    assert r.status_code == 404, r.text
    refused(
        await phys(
            client,
            ident,
            cid,
            "",
            upgrade_body(pin={"value": await tokenize(client, ident, "12a4")}),
        ),
        "PIN_INVALID_FORMAT",
    )
    refused(
        await phys(client, ident, cid, "", upgrade_body(productReference="GOLD")),
        "PRODUCT_REFERENCE_INVALID",
    )
    refused(
        await phys(client, ident, cid, "", upgrade_body(carrierType="BOX")), "CARRIER_TYPE_INVALID"
    )
    # None of the refusals upgraded it.
    assert "physicalCardDetails" not in await get(client, ident, cid)
    assert (await act(client, ident, cid, "block")).status_code == 204
    refused(await phys(client, ident, cid, "", upgrade_body()), "INSTRUMENT_BLOCKED")
    assert (await act(client, ident, cid, "remove")).status_code == 204
    refused(await phys(client, ident, cid, "", upgrade_body()), "INSTRUMENT_DESTROYED")
    debit = await debit_card(client, ident)
    r = await client.post(
        f"{LATEST}/managed_accounts/{debit['parentManagedAccountId']}/block",
        headers=ident.headers,
    )
    assert r.status_code == 204, r.text
    refused(
        await phys(client, ident, debit["id"], "", upgrade_body()), "PARENT_MANAGED_ACCOUNT_BLOCKED"
    )
    # Explicit DEFAULT product and carrier are accepted, as is another delivery method.
    other = await create(client, ident)
    r = await phys(
        client,
        ident,
        other["id"],
        "",
        upgrade_body(productReference="DEFAULT", carrierType="DEFAULT", deliveryMethod="COURIER"),
    )
    assert r.status_code == 200, r.text
    assert r.json()["physicalCardDetails"]["deliveryMethod"] == "COURIER"


async def test_a_virtual_card_is_refused_every_physical_operation(client, programme):
    p = await programme()
    ident = await verified(client, p)
    cid = (await create(client, ident))["id"]
    code = {"activationCode": CODE}
    for op, body, method in (
        ("activate", code, "POST"),
        ("pin", None, "GET"),
        ("pin/unblock", None, "PATCH"),
        ("replace_damaged", code, "POST"),
        ("report_lost", None, "POST"),
        ("report_stolen", None, "POST"),
        ("replace_lost_stolen", code, "POST"),
        ("contactless_limit/reset", None, "POST"),
    ):
        r = await phys(client, ident, cid, op, body, method=method)
        refused(r, "INSTRUMENT_NOT_PHYSICAL")
    # Delivery details belong to upgraded cards; an upgraded one takes them before activation.
    r = await client.patch(
        f"{LATEST}/managed_cards/{cid}", headers=ident.headers, json={"deliveryMethod": "COURIER"}
    )
    refused(r, "INSTRUMENT_NOT_PHYSICAL")
    up = await upgraded(client, ident)
    moved = {**ADDRESS, "city": "Sliema", "addressLine2": "Flat 2"}
    r = await client.patch(
        f"{LATEST}/managed_cards/{up['id']}",
        headers=ident.headers,
        json={"deliveryAddress": moved, "deliveryMethod": "REGISTERED_MAIL"},
    )
    assert r.status_code == 200, r.text
    details = r.json()["physicalCardDetails"]
    assert details["deliveryAddress"] == moved and details["deliveryMethod"] == "REGISTERED_MAIL"
    r = await client.patch(
        f"{LATEST}/managed_cards/{up['id']}",
        headers=ident.headers,
        json={"deliveryAddress": {"name": "Ada"}},
    )
    assert r.status_code == 400, r.text


async def test_pin_block_by_the_simulator_and_unblock(client, programme):
    p = await programme()
    ident = await verified(client, p)
    pending = await upgraded(client, ident)
    sim = {"programme-key": p.api_key}
    r = await client.post(f"{SIM}/cards/{pending['id']}/pin_block", headers=sim)
    refused(r, "PHYSICAL_CARD_NOT_ACTIVATED")
    refused(
        await phys(client, ident, pending["id"], "pin/unblock", method="PATCH"),
        "PHYSICAL_CARD_NOT_ACTIVATED",
    )
    card = await activated(client, ident)
    r = await client.post(f"{SIM}/cards/{card['id']}/pin_block", headers=sim)
    assert r.status_code == 204, r.text
    assert (await get(client, ident, card["id"]))["physicalCardDetails"]["pinBlocked"] is True
    refused(await phys(client, ident, card["id"], "pin", method="GET"), "PIN_TRIES_EXCEEDED")
    r = await phys(client, ident, card["id"], "pin/unblock", method="PATCH")
    assert r.status_code == 204, r.text
    assert (await get(client, ident, card["id"]))["physicalCardDetails"]["pinBlocked"] is False
    assert (await phys(client, ident, card["id"], "pin", method="GET")).status_code == 200
    # Blocked and removed cards.
    assert (await act(client, ident, card["id"], "block")).status_code == 204
    refused(await phys(client, ident, card["id"], "pin", method="GET"), "INSTRUMENT_BLOCKED")
    refused(
        await phys(client, ident, card["id"], "pin/unblock", method="PATCH"), "INSTRUMENT_BLOCKED"
    )
    assert (await act(client, ident, card["id"], "remove")).status_code == 204
    refused(await phys(client, ident, card["id"], "pin", method="GET"), "INSTRUMENT_DESTROYED")
    # Another programme's card, and a live programme.
    other = await programme()
    r = await client.post(
        f"{SIM}/cards/{card['id']}/pin_block", headers={"programme-key": other.api_key}
    )
    assert r.status_code == 404
    live = await programme(mode="live")
    r = await client.post(
        f"{SIM}/cards/{card['id']}/pin_block", headers={"programme-key": live.api_key}
    )
    assert r.status_code == 404


async def test_replace_damaged(client, programme):
    p = await programme()
    ident = await verified(client, p)
    pending = await upgraded(client, ident)
    refused(
        await phys(client, ident, pending["id"], "replace_damaged", {"activationCode": "1"}),
        "PHYSICAL_CARD_NOT_ACTIVATED",
    )
    card = await activated(client, ident)
    cid = card["id"]
    r = await phys(client, ident, cid, "replace_damaged", {"activationCode": "654321"})
    assert r.status_code == 204, r.text
    again = await get(client, ident, cid)
    assert again["type"] == "PHYSICAL" and again["state"] == {"state": "ACTIVE"}
    assert again["cardNumber"] == card["cardNumber"]
    details = again["physicalCardDetails"]
    assert details["pendingActivation"] is True and details["manufacturingState"] == "REQUESTED"
    assert details["replacement"] == {"replacementId": cid, "replacementReason": "DAMAGED"}
    refused(
        await phys(client, ident, cid, "replace_damaged", {"activationCode": "1"}),
        "INSTRUMENT_ALREADY_PENDING_REPLACEMENT",
    )
    # The old code no longer activates; the new one does.
    refused(
        await phys(client, ident, cid, "activate", {"activationCode": CODE}),
        "ACTIVATION_CODE_INVALID",
    )
    r = await phys(client, ident, cid, "activate", {"activationCode": "654321"})
    assert r.status_code == 200 and r.json()["physicalCardDetails"]["manufacturingState"] == (
        "DELIVERED"
    )
    # A blocked card may be replaced and stays blocked; a lost or stolen one may not.
    assert (await act(client, ident, cid, "block")).status_code == 204
    r = await phys(client, ident, cid, "replace_damaged", {"activationCode": "1"})
    assert r.status_code == 204, r.text
    assert (await get(client, ident, cid))["state"] == {"state": "BLOCKED", "blockedReason": "USER"}
    lost = await activated(client, ident)
    assert (await phys(client, ident, lost["id"], "report_lost")).status_code == 204
    refused(
        await phys(client, ident, lost["id"], "replace_damaged", {"activationCode": "1"}),
        "INSTRUMENT_MARKED_AS_LOST",
    )
    stolen = await activated(client, ident)
    assert (await phys(client, ident, stolen["id"], "report_stolen")).status_code == 204
    refused(
        await phys(client, ident, stolen["id"], "replace_damaged", {"activationCode": "1"}),
        "INSTRUMENT_ALREADY_DESTROYED",
    )


async def test_report_lost_and_stolen(client, programme):
    p = await programme()
    ident = await verified(client, p)
    # Lost: also before activation.
    pending = await upgraded(client, ident)
    pid = pending["id"]
    assert (await phys(client, ident, pid, "report_lost")).status_code == 204
    lost = await get(client, ident, pid)
    assert lost["state"] == {"state": "BLOCKED", "blockedReason": "LOST"}
    refused(await phys(client, ident, pid, "report_lost"), "INSTRUMENT_ALREADY_MARKED_LOST")
    refused(await phys(client, ident, pid, "report_stolen"), "INSTRUMENT_ALREADY_MARKED_LOST")
    refused(await act(client, ident, pid, "block"), "INSTRUMENT_MARKED_LOST_STOLEN")
    refused(await act(client, ident, pid, "unblock"), "INSTRUMENT_MARKED_LOST_STOLEN")
    refused(
        await phys(client, ident, pid, "activate", {"activationCode": CODE}), "INSTRUMENT_BLOCKED"
    )
    # A user-blocked card keeps its reason, and is lost all the same.
    blocked = await upgraded(client, ident)
    assert (await act(client, ident, blocked["id"], "block")).status_code == 204
    assert (await phys(client, ident, blocked["id"], "report_lost")).status_code == 204
    got = await get(client, ident, blocked["id"])
    assert got["state"] == {"state": "BLOCKED", "blockedReason": "USER"}
    refused(await act(client, ident, blocked["id"], "unblock"), "INSTRUMENT_MARKED_LOST_STOLEN")
    # Stolen: activated cards only.
    card = await upgraded(client, ident)
    refused(await phys(client, ident, card["id"], "report_stolen"), "PHYSICAL_CARD_NOT_ACTIVATED")
    card = await activated(client, ident)
    cid = card["id"]
    assert (await phys(client, ident, cid, "report_stolen")).status_code == 204
    assert (await get(client, ident, cid))["state"] == {
        "state": "DESTROYED",
        "destroyedReason": "STOLEN",
    }
    refused(await phys(client, ident, cid, "report_stolen"), "INSTRUMENT_ALREADY_MARKED_STOLEN")
    refused(await phys(client, ident, cid, "report_lost"), "INSTRUMENT_ALREADY_MARKED_STOLEN")
    refused(await act(client, ident, cid, "remove"), "INSTRUMENT_ALREADY_REMOVED")
    # A removed card.
    removed = await activated(client, ident)
    assert (await act(client, ident, removed["id"], "remove")).status_code == 204
    refused(await phys(client, ident, removed["id"], "report_lost"), "INSTRUMENT_DESTROYED")
    refused(await phys(client, ident, removed["id"], "report_stolen"), "INSTRUMENT_DESTROYED")


async def test_replace_a_stolen_prepaid_card_moves_its_balance(client, programme, container):
    p = await programme()
    ident = await verified(client, p)
    card = await activated(client, ident)
    cid = card["id"]
    rules = {"blockedMerchantCategories": ["7995"], "allowAtm": False}
    r = await client.post(
        f"{LATEST}/managed_cards/{cid}/spend_rules", headers=ident.headers, json=rules
    )
    assert r.status_code == 204, r.text
    pin = await phys(client, ident, cid, "pin", method="GET")
    old_pin = await detokenize(client, ident, pin.json()["pin"]["value"], "PIN")
    await fund(container, p, cid, 500)
    refused(
        await phys(client, ident, cid, "replace_lost_stolen", {"activationCode": "777"}),
        "INSTRUMENT_NOT_MARKED_LOST_OR_STOLEN",
    )
    assert (await phys(client, ident, cid, "report_stolen")).status_code == 204
    r = await client.get(f"{LATEST}/managed_cards/{cid}/spend_rules", headers=ident.headers)
    assert r.json()["cardLevelSpendRules"] == {}  # destroyed: it has none (D22)
    r = await phys(client, ident, cid, "replace_lost_stolen", {"activationCode": "777"})
    assert r.status_code == 200, r.text
    old = r.json()
    assert old["id"] == cid
    assert old["state"] == {"state": "DESTROYED", "destroyedReason": "STOLEN"}
    assert old["balances"] == {"availableBalance": 0, "actualBalance": 0}
    replacement = old["physicalCardDetails"]["replacement"]
    assert replacement["replacementReason"] == "LOST_STOLEN"
    new_id = replacement["replacementId"]
    assert new_id != cid
    new = await get(client, ident, new_id)
    assert new["friendlyName"] == card["friendlyName"] + " Replacement"
    assert new["mode"] == "PREPAID_MODE" and new["state"] == {"state": "ACTIVE"}
    assert new["type"] == "VIRTUAL"
    assert new["balances"] == {"availableBalance": 500, "actualBalance": 500}
    assert new["cardNumber"] != card["cardNumber"]
    details = new["physicalCardDetails"]
    assert details["pendingActivation"] is True and details["manufacturingState"] == "REQUESTED"
    assert details["replacement"] == {"replacementId": "0"}
    r = await client.get(f"{LATEST}/managed_cards/{new_id}/spend_rules", headers=ident.headers)
    assert r.json()["cardLevelSpendRules"] == rules
    r = await client.get(f"{LATEST}/managed_cards/{cid}/spend_rules", headers=ident.headers)
    assert r.json()["cardLevelSpendRules"] == {}
    # Activated with the code given at replacement, it has the old card's PIN.
    r = await phys(client, ident, new_id, "activate", {"activationCode": "777"})
    assert r.status_code == 200, r.text
    pin = await phys(client, ident, new_id, "pin", method="GET")
    assert await detokenize(client, ident, pin.json()["pin"]["value"], "PIN") == old_pin
    refused(
        await phys(client, ident, cid, "replace_lost_stolen", {"activationCode": "777"}),
        "INSTRUMENT_ALREADY_REPLACED",
    )
    # The replacement is upgraded already.
    refused(
        await phys(client, ident, new_id, "", upgrade_body()),
        "INSTRUMENT_ALREADY_UPGRADED_TO_PHYSICAL",
    )


async def test_replace_a_lost_debit_card(client, programme):
    p = await programme()
    ident = await verified(client, p)
    card = await debit_card(client, ident)
    cid = card["id"]
    r = await phys(client, ident, cid, "", upgrade_body())
    assert r.status_code == 200, r.text
    assert (await phys(client, ident, cid, "report_lost")).status_code == 204
    r = await client.post(
        f"{LATEST}/managed_accounts/{card['parentManagedAccountId']}/block", headers=ident.headers
    )
    assert r.status_code == 204
    refused(
        await phys(client, ident, cid, "replace_lost_stolen", {"activationCode": "1"}),
        "PARENT_MANAGED_ACCOUNT_NOT_ACTIVE",
    )
    r = await client.post(
        f"{LATEST}/managed_accounts/{card['parentManagedAccountId']}/unblock",
        headers=ident.headers,
    )
    assert r.status_code == 204
    r = await phys(client, ident, cid, "replace_lost_stolen", {"activationCode": "1"})
    assert r.status_code == 200, r.text
    old = r.json()
    assert old["state"] == {"state": "DESTROYED", "destroyedReason": "LOST"}
    new = await get(client, ident, old["physicalCardDetails"]["replacement"]["replacementId"])
    assert new["mode"] == "DEBIT_MODE"
    assert new["parentManagedAccountId"] == card["parentManagedAccountId"]
    assert new["availableToSpend"] == [
        {"value": {"currency": "GBP", "amount": 0}, "interval": "ALWAYS"}
    ]


async def test_contactless_limit_reset(client, programme):
    p = await programme()
    ident = await verified(client, p)
    pending = await upgraded(client, ident)
    refused(
        await phys(client, ident, pending["id"], "contactless_limit/reset"),
        "PHYSICAL_CARD_NOT_ACTIVATED",
    )
    card = await activated(client, ident)
    refused(
        await phys(client, ident, card["id"], "contactless_limit/reset"),
        "PHYSICAL_CARD_TYPE_NOT_SUPPORTED",
    )
    assert (await phys(client, ident, card["id"], "report_lost")).status_code == 204
    refused(await phys(client, ident, card["id"], "contactless_limit/reset"), "INSTRUMENT_BLOCKED")
    stolen = await activated(client, ident)
    assert (await phys(client, ident, stolen["id"], "report_stolen")).status_code == 204
    refused(
        await phys(client, ident, stolen["id"], "contactless_limit/reset"), "INSTRUMENT_DESTROYED"
    )


async def test_refused_callers(client, programme):
    p = await programme()
    other_p = await programme()
    owner = await verified(client, p)
    intruder = await verified(client, p)
    outsider = await verified(client, other_p)
    card = await activated(client, owner)
    cid = card["id"]
    code = {"activationCode": CODE}
    ops = [
        ("POST", "", upgrade_body()),
        ("POST", "activate", code),
        ("GET", "pin", None),
        ("PATCH", "pin/unblock", None),
        ("POST", "replace_damaged", code),
        ("POST", "report_lost", None),
        ("POST", "report_stolen", None),
        ("POST", "replace_lost_stolen", code),
        ("POST", "contactless_limit/reset", None),
    ]
    token = owner.headers["Authorization"]
    refusals = [
        ({}, 400),
        ({"api-key": "not-a-key", "Authorization": token}, 401),
        ({"api-key": p.api_key, "Authorization": "Bearer garbage.token.here"}, 401),
        ({"api-key": other_p.api_key, "Authorization": token}, 403),
    ]
    wrong = []
    for base in BASES:
        for method, op, body in ops:
            for headers, status in refusals:
                r = await phys(client, owner, cid, op, body, base, method, headers)
                if r.status_code != status:
                    wrong.append(f"{method} {base} {op} {sorted(headers)}: {r.status_code}")
            for who in (intruder, outsider):
                r = await phys(client, who, cid, op, body, base, method)
                if r.status_code != 404:
                    wrong.append(f"{who.email} {method} {base} {op}: {r.status_code}")
        r = await phys(client, owner, cid, "", upgrade_body(), "/3.1.0/multi")
        assert r.status_code == 404
    assert not wrong, "\n".join(wrong)
    assert await get(client, owner, cid) == card


async def test_step_up_where_the_interface_says(client, programme, admin_headers):
    p = await programme()
    ident = await verified(client, p)
    card = await activated(client, ident)
    virtual = await create(client, ident)
    await enrol_sms(client, ident.headers)
    r = await client.patch(
        f"/portal/api/programmes/{p.id}/settings",
        headers=admin_headers,
        json={"stepUpRequired": True},
    )
    assert r.status_code == 200
    code = {"activationCode": CODE}
    stepped = [
        (virtual["id"], "POST", "", upgrade_body()),
        (card["id"], "POST", "activate", code),
        (card["id"], "GET", "pin", None),
        (card["id"], "POST", "replace_damaged", code),
        (card["id"], "POST", "replace_lost_stolen", code),
    ]
    for cid, method, op, body in stepped:
        r = await phys(client, ident, cid, op, body, method=method)
        assert r.status_code == 403 and r.json()["errorCode"] == "STEP_UP_REQUIRED", (op, r.text)
    # PIN unblock, contactless reset, report lost and stolen need none (D28).
    assert (await phys(client, ident, card["id"], "pin/unblock", method="PATCH")).status_code == 204
    refused(
        await phys(client, ident, card["id"], "contactless_limit/reset"),
        "PHYSICAL_CARD_TYPE_NOT_SUPPORTED",
    )
    await otp_step_up(client, ident.headers)
    r = await phys(client, ident, virtual["id"], "", upgrade_body())
    assert r.status_code == 200, r.text
    assert (await phys(client, ident, card["id"], "pin", method="GET")).status_code == 200
    assert (await phys(client, ident, card["id"], "report_stolen")).status_code == 204
    r = await phys(client, ident, card["id"], "replace_lost_stolen", code)
    assert r.status_code == 200, r.text


async def test_idempotent_replays(client, programme):
    p = await programme()
    ident = await verified(client, p)
    card = await create(client, ident)
    headers = {**ident.headers, "idempotency-ref": "up-1"}
    first = await phys(client, ident, card["id"], "", upgrade_body(), headers=headers)
    again = await phys(client, ident, card["id"], "", upgrade_body(), headers=headers)
    assert first.status_code == again.status_code == 200
    assert first.json() == again.json()
    r = await phys(client, ident, card["id"], "activate", {"activationCode": CODE})
    assert r.status_code == 200
    assert (await phys(client, ident, card["id"], "report_stolen")).status_code == 204
    headers = {**ident.headers, "idempotency-ref": "replace-1"}
    first = await phys(
        client, ident, card["id"], "replace_lost_stolen", {"activationCode": "1"}, headers=headers
    )
    again = await phys(
        client, ident, card["id"], "replace_lost_stolen", {"activationCode": "1"}, headers=headers
    )
    assert first.status_code == again.status_code == 200, again.text
    assert first.json() == again.json()
    r = await client.get(f"{LATEST}/managed_cards", headers=ident.headers)
    assert r.json()["count"] == 2  # the stolen card and one replacement
    # A first call refused with a 409 stores nothing under its ref.
    other = await upgraded(client, ident)
    headers = {**ident.headers, "idempotency-ref": "lost-1"}
    refused(
        await phys(client, ident, other["id"], "report_stolen", headers=headers),
        "PHYSICAL_CARD_NOT_ACTIVATED",
    )
    r = await phys(client, ident, other["id"], "report_lost", headers=headers)
    assert r.status_code == 204, r.text


async def test_manufacturing_steps_follow_the_programme_clock(client, container, hooked):  # noqa: F811
    p, receiver = hooked
    ident = await verified(client, p)
    card = await upgraded(client, ident)
    cid = card["id"]
    sim = {"programme-key": p.api_key}

    async def advance(seconds: int) -> None:
        r = await client.post(f"{SIM}/clock/advance", headers=sim, json={"seconds": seconds})
        assert r.status_code == 200, r.text
        # The session lapsed meanwhile: log in again.
        r = await login(client, p, ident.email)
        assert r.status_code == 200, r.text
        ident.token = r.json()["token"]

    await advance(3599)
    assert (await get(client, ident, cid))["physicalCardDetails"]["manufacturingState"] == (
        "REQUESTED"
    )
    await advance(1)
    assert (await get(client, ident, cid))["physicalCardDetails"]["manufacturingState"] == (
        "SENT_FOR_FULFILLMENT"
    )
    await advance(23 * 3600)
    assert (await get(client, ident, cid))["physicalCardDetails"]["manufacturingState"] == (
        "DISPATCHED"
    )
    r = await phys(client, ident, cid, "activate", {"activationCode": CODE})
    assert r.status_code == 200
    await advance(48 * 3600)  # nothing follows delivery
    assert (await get(client, ident, cid))["physicalCardDetails"]["manufacturingState"] == (
        "DELIVERED"
    )
    # Both steps due at once are both taken, in order.
    other = await upgraded(client, ident)
    await advance(25 * 3600)
    assert (await get(client, ident, other["id"]))["physicalCardDetails"][
        "manufacturingState"
    ] == "DISPATCHED"
    await deliver(container)
    upgrade_path = "/hooks/managed_cards/physical_cards_upgrade/watch"
    events = [e for e in receiver.received if e.path == upgrade_path]
    assert all(signed_by(p.api_key, e) for e in events)
    mine = [
        e.json["physicalCardDetails"]["manufacturingState"]
        for e in events
        if e.json["id"] == {"type": "managed_cards", "id": cid}
    ]
    assert mine == ["REQUESTED", "SENT_FOR_FULFILLMENT", "DISPATCHED", "DELIVERED"]
    theirs = [
        e.json["physicalCardDetails"]["manufacturingState"]
        for e in events
        if e.json["id"]["id"] == other["id"]
    ]
    assert theirs == ["REQUESTED", "SENT_FOR_FULFILLMENT", "DISPATCHED"]
    assert events[0].json["upgradedTimestamp"].isdigit()
    states = [
        e.json for e in receiver.received if e.path == "/hooks/managed_cards/state_change/watch"
    ]
    assert [(s["eventType"], s["cardType"]) for s in states] == [("ACTIVATED", "PHYSICAL")]


async def test_a_read_or_the_worker_takes_a_due_step(client, programme, container):
    """The clock moved without the simulator's catch-up (as when no background step ran yet):
    the card's next read takes the step, and so does a server process's background round."""
    p = await programme()
    ident = await verified(client, p)
    card = await upgraded(client, ident)
    other = await upgraded(client, ident)
    async with container.db.transaction() as session:
        row = await session.get(Programme, int(p.id))
        assert row is not None
        await programmes.advance_clock(session, row, 3600)

    async def stored_state(card_id: str) -> str | None:
        async with container.db.transaction() as session:
            stored = await session.get(ManagedCard, int(card_id))
            assert stored is not None
            return stored.manufacturing_state

    r = await login(client, p, ident.email)
    ident.token = r.json()["token"]
    got = await get(client, ident, card["id"])
    assert got["physicalCardDetails"]["manufacturingState"] == "SENT_FOR_FULFILLMENT"
    assert await stored_state(other["id"]) == "REQUESTED"  # nobody read it yet
    await due.run_due(container.db, container.clock, [manufacturing.DUE])
    assert await stored_state(other["id"]) == "SENT_FOR_FULFILLMENT"
    r = await client.get(
        f"{LATEST}/managed_cards",
        headers=ident.headers,
        params={"manufacturingState": "SENT_FOR_FULFILLMENT"},
    )
    assert sorted(c["id"] for c in r.json()["cards"]) == sorted([card["id"], other["id"]])


async def test_lost_stolen_and_replacement_webhooks(client, container, hooked):  # noqa: F811
    p, receiver = hooked
    ident = await verified(client, p)
    lost = await upgraded(client, ident)
    assert (await phys(client, ident, lost["id"], "report_lost")).status_code == 204
    card = await activated(client, ident)
    cid = card["id"]
    await fund(container, p, cid, 300)
    assert (await phys(client, ident, cid, "report_stolen")).status_code == 204
    r = await phys(client, ident, cid, "replace_lost_stolen", {"activationCode": "1"})
    new_id = r.json()["physicalCardDetails"]["replacement"]["replacementId"]
    damaged = await activated(client, ident)
    r = await phys(client, ident, damaged["id"], "replace_damaged", {"activationCode": "2"})
    assert r.status_code == 204
    await deliver(container)
    states = [
        (e.json["id"]["id"], e.json["eventType"], e.json["state"])
        for e in receiver.received
        if e.path == "/hooks/managed_cards/state_change/watch"
    ]
    assert (lost["id"], "BLOCKED", {"state": "BLOCKED", "blockedReason": "LOST"}) in states
    assert (cid, "DESTROYED", {"state": "DESTROYED", "destroyedReason": "STOLEN"}) in states
    replacements = [
        e.json for e in receiver.received if e.path == "/hooks/managed_cards/replacement/watch"
    ]
    # Events of different cards may arrive in any order.
    assert sorted(
        (x["id"]["id"], x["replacementId"], x["replacementReason"], x["eventType"])
        for x in replacements
    ) == sorted(
        [
            (cid, new_id, "LOST_STOLEN", "PHYSICAL_REPLACEMENT"),
            (damaged["id"], damaged["id"], "DAMAGED", "PHYSICAL_REPLACEMENT"),
        ]
    )
    adjustments = {
        e.json["id"]["id"]: e.json
        for e in receiver.received
        if e.path == "/hooks/managed_cards/adjustments/watch"
    }
    assert set(adjustments) == {cid, new_id}
    assert adjustments[new_id]["adjustmentType"] == "LOST_STOLEN_REPLACEMENT_BALANCE_TRANSFER"
    assert adjustments[new_id]["adjustmentAmount"] == {"currency": "EUR", "amount": "300"}
    assert adjustments[new_id]["availableBalance"] == {"currency": "EUR", "amount": "300"}
    assert adjustments[cid]["adjustmentAmount"] == {"currency": "EUR", "amount": "-300"}
    assert adjustments[cid]["transactionId"] == adjustments[new_id]["transactionId"]
