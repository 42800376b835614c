"""Where the card slices meet, black-box over HTTP (D22, D25, D31, cards.md §3.12, §4, §5.4,
§6.1): card-present use of physical cards and the PIN at the terminal, a card past its expiry,
profile-level spend rules set by the operator, physical pool cards, and a lost/stolen
replacement while a prepaid card holds an open authorisation."""

from __future__ import annotations

import json
from typing import Any

import httpx

from multibank.cards.models import ManagedCard
from multibank.cards.physical import PIN_LABEL
from tests.api.test_card_assign import assign, make_pool, programme_name
from tests.api.test_card_assign import prepaid as pool_profile
from tests.api.test_card_lifecycle import advance_to, month_start, relogin
from tests.api.test_card_payments import (
    AUTHORISATIONS,
    balances,
    buy,
    ledger_ok,
    purchase,
    reveal,
    simulate,
)
from tests.api.test_managed_cards import LATEST, create, get
from tests.api.test_physical_cards import (
    activated,
    detokenize,
    fund,
    phys,
    upgraded,
)
from tests.api.test_webhooks import deliver, hooked  # noqa: F401 (the fixture)
from tests.factories import Identity, verified
from tests.test_cli import cli, cli_env, ok  # noqa: F401 (the fixture)

PORTAL = "/portal/api/programmes"


async def pin_of(client: httpx.AsyncClient, ident: Identity, card_id: str) -> str:
    r = await phys(client, ident, card_id, "pin", method="GET")
    assert r.status_code == 200, r.text
    return await detokenize(client, ident, r.json()["pin"]["value"], "PIN")


def other_pin(pin: str) -> str:
    return f"{(int(pin) + 1) % 10_000:04d}"


async def pin_of_card(container: Any, card_id: str) -> str:
    """The PIN as the card keeps it (a blocked PIN cannot be read through the API)."""
    async with container.db.transaction() as session:
        card = await session.get(ManagedCard, int(card_id))
        assert card is not None and card.pin_encrypted is not None
        return container.card_keys().decrypt(card.pin_encrypted, card.id, PIN_LABEL)


async def present(
    client: httpx.AsyncClient, p: Any, card_id: str, amount: int, pin: str | None = None
) -> str:
    body = buy(amount, cardPresent=True, **({"pin": pin} if pin is not None else {}))
    code: str = (await simulate(client, p, f"{card_id}/purchase", body))["code"]
    return code


async def pin_blocked(client: httpx.AsyncClient, ident: Identity, card_id: str) -> bool:
    blocked: bool = (await get(client, ident, card_id))["physicalCardDetails"]["pinBlocked"]
    return blocked


def reasons(receiver: Any, card_id: str) -> list[str]:
    return [
        e.json["declineReason"]
        for e in receiver.received
        if e.path == AUTHORISATIONS and e.json["id"]["id"] == card_id
    ]


# D22 #6 and the PIN (D25)


async def test_card_present_needs_an_activated_physical_card(client, container, hooked):  # noqa: F811
    p, receiver = hooked
    ident = await verified(client, p)
    pending = await upgraded(client, ident)
    await fund(container, p, pending["id"], 1000)
    assert await present(client, p, pending["id"], 50) == "DENIED_CARD_INACTIVE"
    # Online, an upgraded card that is not activated pays (cards.md §5.4).
    assert (await purchase(client, p, pending["id"], 50))["code"] == "APPROVED"
    virtual = await activated(client, ident)  # activated: card-present works
    await fund(container, p, virtual["id"], 1000)
    assert await present(client, p, virtual["id"], 50) == "APPROVED"
    await deliver(container)
    assert reasons(receiver, pending["id"]) == ["PHYSICAL_NOT_ACTIVATED", "NO_REASON"]
    assert reasons(receiver, virtual["id"]) == ["NO_REASON"]


async def test_three_wrong_pins_block_the_pin_and_a_right_one_resets_the_count(
    client,
    container,
    hooked,  # noqa: F811
):
    p, receiver = hooked
    ident = await verified(client, p)
    card = await activated(client, ident)
    cid = card["id"]
    await fund(container, p, cid, 10_000)
    pin = await pin_of(client, ident, cid)
    wrong = other_pin(pin)
    # Two wrong, then the right one: the count starts again.
    assert await present(client, p, cid, 10, wrong) == "DENIED_OTHER"
    assert await present(client, p, cid, 10, wrong) == "DENIED_OTHER"
    assert await present(client, p, cid, 10, pin) == "APPROVED"
    assert await present(client, p, cid, 10, wrong) == "DENIED_OTHER"
    assert await present(client, p, cid, 10, wrong) == "DENIED_OTHER"
    assert not await pin_blocked(client, ident, cid)
    assert await present(client, p, cid, 10, wrong) == "DENIED_OTHER"
    assert await pin_blocked(client, ident, cid)
    # Blocked: card-present is refused even with the right PIN or none; online still pays.
    assert await present(client, p, cid, 10, pin) == "DENIED_OTHER"
    assert await present(client, p, cid, 10) == "DENIED_OTHER"
    assert (await purchase(client, p, cid, 10))["code"] == "APPROVED"
    # An unblock starts the count again: two wrong PINs do not block it.
    r = await phys(client, ident, cid, "pin/unblock", method="PATCH")
    assert r.status_code == 204, r.text
    assert await present(client, p, cid, 10, wrong) == "DENIED_OTHER"
    assert await present(client, p, cid, 10, wrong) == "DENIED_OTHER"
    assert not await pin_blocked(client, ident, cid)
    assert await present(client, p, cid, 10, pin) == "APPROVED"
    # Declines moved nothing: three approved purchases of 10, each with its fee of 10.
    assert await balances(client, ident, f"managed_cards/{cid}") == (10_000 - 3 * 20,) * 2
    await deliver(container)
    assert reasons(receiver, cid) == [
        "PIN_CHECKS_FAILED",
        "PIN_CHECKS_FAILED",
        "NO_REASON",
        "PIN_CHECKS_FAILED",
        "PIN_CHECKS_FAILED",
        "PIN_RETRIES_EXCEEDED",
        "PIN_RETRIES_EXCEEDED",
        "PIN_RETRIES_EXCEEDED",
        "NO_REASON",
        "PIN_CHECKS_FAILED",
        "PIN_CHECKS_FAILED",
        "NO_REASON",
    ]


async def test_the_simulators_pin_block_refuses_card_present_use(client, container, programme):
    p = await programme()
    ident = await verified(client, p)
    card = await activated(client, ident)
    await fund(container, p, card["id"], 1000)
    r = await client.post(
        f"/simulate/api/cards/{card['id']}/pin_block", headers={"programme-key": p.api_key}
    )
    assert r.status_code == 204, r.text
    # A blocked PIN refuses card-present use whatever is entered, the right PIN included.
    pin = await pin_of_card(container, card["id"])
    assert await present(client, p, card["id"], 10, pin) == "DENIED_OTHER"
    assert (await purchase(client, p, card["id"], 10))["code"] == "APPROVED"


async def test_a_malformed_pin_is_a_400(client, container, programme):
    p = await programme()
    ident = await verified(client, p)
    card = await activated(client, ident)
    for pin in ("123", "12345", "12a4", 1234):
        body = buy(10, cardPresent=True, pin=pin)
        r = await client.post(
            f"/simulate/api/cards/{card['id']}/purchase",
            headers={"programme-key": p.api_key},
            json=body,
        )
        assert r.status_code == 400, (pin, r.text)
    assert await balances(client, ident, f"managed_cards/{card['id']}") == (0, 0)


async def test_the_pin_field_is_in_the_simulators_openapi(client):
    r = await client.get("/simulate/api/openapi.json")
    assert r.status_code == 200, r.text
    schemas = r.json()["components"]["schemas"]
    purchase_schema = next(v for k, v in schemas.items() if k.startswith("Purchase"))
    assert purchase_schema["properties"]["pin"]["anyOf"][0]["pattern"] == "^[0-9]{4}$"


# D22 #3: past its expiry


async def test_a_card_past_its_expiry_is_declined_for_its_expiry(client, container, hooked):  # noqa: F811
    p, receiver = hooked
    ident = await verified(client, p)
    card = await create(client, ident)  # NO_RENEW
    renewing = await create(client, ident, renewalType="RENEW")
    for c in (card, renewing):
        await fund(container, p, c["id"], 1000)
    number = await reveal(container, renewing["id"])
    old_cvv = container.card_keys().cvv(number, renewing["expiryMmyy"], 1)
    await advance_to(client, p, month_start(card["expiryMmyy"], 1))
    await relogin(client, ident)
    # Destroyed by the clock as EXPIRED: declined for its expiry, nothing moves.
    assert (await purchase(client, p, card["id"], 50))["code"] == "DENIED_CARD_EXPIRY"
    read = await get(client, ident, card["id"])
    assert read["state"] == {"state": "DESTROYED", "destroyedReason": "EXPIRED"}
    assert read["balances"] == {"availableBalance": 1000, "actualBalance": 1000}
    # A renewing card was renewed: it pays by id, and by details only with its new expiry.
    body = {**buy(50), "cardNumber": number, "cvv": old_cvv, "expiryDate": renewing["expiryMmyy"]}
    assert (await simulate(client, p, "purchase", body))["code"] == "DENIED_CARD_EXPIRY"
    assert (await purchase(client, p, renewing["id"], 50))["code"] == "APPROVED"
    await deliver(container)
    assert reasons(receiver, card["id"]) == ["CARD_EXPIRY_CHECKS_FAILED"]
    assert reasons(receiver, renewing["id"]) == ["CARD_EXPIRY_CHECKS_FAILED", "NO_REASON"]


async def test_a_purchase_takes_the_expiry_the_clock_has_made_due(client, container, programme):
    """A card whose expiry passed before any step of the clock took it: the purchase takes the
    step first, so it answers as a read of the card would show it."""
    p = await programme()
    ident = await verified(client, p)
    card = await create(client, ident)
    await fund(container, p, card["id"], 1000)
    async with container.db.transaction() as session:
        row = await session.get(ManagedCard, int(card["id"]))
        assert row is not None
        now = container.clock.now_ms()
        row.expiry_mmyy = "0125"  # January 2025: long past on any clock
        row.expires_at = row.lifecycle_due_at = month_start("0125", 1)
        assert row.expires_at < now
    assert (await purchase(client, p, card["id"], 50))["code"] == "DENIED_CARD_EXPIRY"
    read = await get(client, ident, card["id"])
    assert read["state"] == {"state": "DESTROYED", "destroyedReason": "EXPIRED"}
    assert await balances(client, ident, f"managed_cards/{card['id']}") == (1000, 1000)


# Profile-level spend rules (D22)


async def set_profile_rules(
    client: httpx.AsyncClient, admin: dict[str, str], p: Any, profile_id: str, rules: Any
) -> httpx.Response:
    return await client.patch(
        f"{PORTAL}/{p.id}/profiles/{profile_id}", headers=admin, json={"spendRules": rules}
    )


async def all_levels(client: httpx.AsyncClient, ident: Identity, card_id: str) -> dict[str, Any]:
    r = await client.get(f"{LATEST}/managed_cards/{card_id}/spend_rules", headers=ident.headers)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def test_profile_rules_are_set_read_and_checked_with_the_cards(
    client,
    container,
    hooked,  # noqa: F811
    admin_headers,
):
    p, receiver = hooked
    ident = await verified(client, p)
    card = await create(client, ident)
    cid = card["id"]
    await fund(container, p, cid, 10_000)
    profile_rules = {
        "blockedMerchantCategories": ["7995"],
        "allowedMerchantCountries": ["MT", "IT"],
        "allowAtm": False,
    }
    r = await set_profile_rules(client, admin_headers, p, card["profileId"], profile_rules)
    assert r.status_code == 200, r.text
    assert r.json()["spendRules"] == profile_rules
    r = await client.get(f"{PORTAL}/{p.id}/profiles", headers=admin_headers)
    listed = {x["id"]: x for x in r.json()}
    assert listed[card["profileId"]]["spendRules"] == profile_rules
    levels = await all_levels(client, ident, cid)
    assert levels["profileLevelSpendRules"] == profile_rules
    assert levels["cardLevelSpendRules"] == {} and levels["identityLevelSpendRules"] == {}
    # The card's own rules allow what the profile's block: a failure at either level declines.
    r = await client.post(
        f"{LATEST}/managed_cards/{cid}/spend_rules",
        headers=ident.headers,
        json={"allowedMerchantCategories": ["7995", "5411"], "blockedMerchantIds": ["666"]},
    )
    assert r.status_code == 204, r.text
    cases = [
        (buy(10, merchantCategoryCode="7995"), "MERCHANT_CATEGORY_BLOCKED"),  # profile
        (
            buy(10, merchantCategoryCode="5411", transactionCountry="FRA"),
            "MERCHANT_COUNTRY_NOT_IN_ALLOWED_LIST",
        ),
        (
            buy(10, merchantCategoryCode="5411", atmWithdrawal=True),
            "MERCHANT_CATEGORY_NOT_IN_ALLOWED_LIST",
        ),
        (buy(10, merchantCategoryCode="5411", merchantId="666"), "MERCHANT_ID_BLOCKED"),  # card
        (buy(10, merchantCategoryCode="5399"), "MERCHANT_CATEGORY_NOT_IN_ALLOWED_LIST"),  # card
        (buy(10, merchantCategoryCode="5411", transactionCountry="ITA"), "NONE"),
    ]
    for body, _ in cases:
        code = (await simulate(client, p, f"{cid}/purchase", body))["code"]
        assert code == ("APPROVED" if body is cases[-1][0] else "DENIED_SPEND_CONTROL"), body
    await deliver(container)
    rules_failed = [
        e.json["authRuleFailedReason"]
        for e in receiver.received
        if e.path == AUTHORISATIONS and e.json["id"]["id"] == cid
    ]
    assert rules_failed == [rule for _, rule in cases]
    # `{}` clears the profile's level: the card's own rules alone decide again.
    r = await set_profile_rules(client, admin_headers, p, card["profileId"], {})
    assert r.status_code == 200 and r.json()["spendRules"] == {}, r.text
    assert (await all_levels(client, ident, cid))["profileLevelSpendRules"] == {}
    body = buy(10, merchantCategoryCode="7995", transactionCountry="FRA")
    assert (await simulate(client, p, f"{cid}/purchase", body))["code"] == "APPROVED"


async def test_profile_rules_are_validated_as_a_cards_and_only_on_card_profiles(
    client, programme, admin_headers
):
    p = await programme()
    card_profile = p.profiles["corporatePrepaidManagedCard"]
    for bad in (
        {"allowedMerchantCountries": ["MLT"]},
        {"blockedMerchantCategories": ["x" * 101]},
        {"spendLimit": [{"value": {"currency": "EUR", "amount": 1}, "interval": "DAILY"}]},
        {"allowAtm": "sometimes"},
        ["7995"],
    ):
        r = await set_profile_rules(client, admin_headers, p, card_profile, bad)
        assert r.status_code == 400, (bad, r.text)
        assert r.json()["syntaxErrors"], r.text
    r = await set_profile_rules(client, admin_headers, p, p.profiles["sends"], {"allowAtm": False})
    assert r.status_code == 409 and r.json()["errorCode"] == "PROFILE_HAS_NO_SPEND_RULES"
    # Null items are dropped, as on a card's rules.
    r = await set_profile_rules(
        client,
        admin_headers,
        p,
        card_profile,
        {"blockedMerchantIds": [None, "9"], "allowCashback": None},
    )
    assert r.status_code == 200 and r.json()["spendRules"] == {"blockedMerchantIds": ["9"]}


# Physical pool cards (D31)


async def test_physical_pool_cards_are_activated_and_pay_card_present(
    cli_env,  # noqa: F811
    client,
    container,
    programme,
    admin_headers,
):
    p = await programme()
    name = await programme_name(client, admin_headers, p)
    made = json.loads(
        ok(
            await cli(
                "cards", "pool", "create", "--programme", name, "--profile",
                pool_profile(p, "corporate"), "--count", "1", "--physical", "--json",
            )
        )
    )  # fmt: skip
    r = await client.post(
        f"{PORTAL}/{p.id}/card_pool",
        headers=admin_headers,
        json={"profileId": pool_profile(p, "corporate"), "count": 1, "physical": True},
    )
    assert r.status_code == 201, r.text
    made += r.json()["cards"]
    ident = await verified(client, p, "corporates")
    for pool_card in made:
        r = await assign(client, ident, pool_card)
        assert r.status_code == 200, r.text
        card = r.json()
        assert card["type"] == "PHYSICAL" and card["state"] == {"state": "ACTIVE"}
        details = card["physicalCardDetails"]
        assert details["manufacturingState"] == "DELIVERED"
        assert details["pendingActivation"] is False and details["pinBlocked"] is False
        assert details["replacement"] == {"replacementId": "0"}
        # Already activated: a second activation is refused, the PIN can be read.
        r = await phys(client, ident, card["id"], "activate", {"activationCode": "123456"})
        assert r.status_code == 409 and r.json()["errorCode"] == "INSTRUMENT_ALREADY_ACTIVATED"
        pin = await pin_of(client, ident, card["id"])
        assert len(pin) == 4 and pin.isdigit()
        await fund(container, p, card["id"], 1000)
        assert await present(client, p, card["id"], 100, other_pin(pin)) == "DENIED_OTHER"
        assert await present(client, p, card["id"], 100, pin) == "APPROVED"
        assert await present(client, p, card["id"], 100) == "APPROVED"
        assert await balances(client, ident, f"managed_cards/{card['id']}") == (780, 780)
    # A virtual pool card stays virtual: card-present use is not permitted.
    virtual = (await make_pool(client, admin_headers, p, "corporate", 1))[0]
    r = await assign(client, ident, virtual)
    assert r.status_code == 200 and r.json()["type"] == "VIRTUAL", r.text
    await fund(container, p, r.json()["id"], 1000)
    assert await present(client, p, r.json()["id"], 100) == "DENIED_OTHER"


# Lost/stolen replacement with an open authorisation (cards.md §3.12)


async def test_a_replacement_takes_only_money_not_held(client, container, programme, admin_headers):
    p = await programme()
    ident = await verified(client, p)
    card = await activated(client, ident)
    cid = card["id"]
    await fund(container, p, cid, 1000)
    held = await simulate(client, p, f"{cid}/authorise", buy(300))
    other = await simulate(client, p, f"{cid}/authorise", buy(200))
    assert held["code"] == other["code"] == "APPROVED"
    assert await balances(client, ident, f"managed_cards/{cid}") == (500, 1000)
    assert (await phys(client, ident, cid, "report_stolen")).status_code == 204
    r = await phys(client, ident, cid, "replace_lost_stolen", {"activationCode": "777"})
    assert r.status_code == 200, r.text
    assert r.json()["balances"] == {"availableBalance": 0, "actualBalance": 500}
    new_id = r.json()["physicalCardDetails"]["replacement"]["replacementId"]
    assert await balances(client, ident, f"managed_cards/{new_id}") == (500, 500)
    await ledger_ok(client, admin_headers, p)
    # The holds stay on the old card: one settles (no fee is left to take), one is reversed.
    path = f"{cid}/authorisations/{held['authorisationId']}"
    assert (await simulate(client, p, f"{path}/settle"))["code"] == "COMPLETED"
    assert await balances(client, ident, f"managed_cards/{cid}") == (0, 200)
    path = f"{cid}/authorisations/{other['authorisationId']}"
    assert (await simulate(client, p, f"{path}/reverse"))["code"] == "COMPLETED"
    # A released hold goes back where it was taken from: the old card's account (decision 0052).
    assert await balances(client, ident, f"managed_cards/{cid}") == (200, 200)
    assert await balances(client, ident, f"managed_cards/{new_id}") == (500, 500)
    # Neither is open any more, and the destroyed card takes no new purchase.
    assert (await simulate(client, p, f"{path}/settle"))["code"] == (
        "DENIED_AUTHORISATION_NOT_PENDING"
    )
    assert (await purchase(client, p, cid, 10))["code"] == "DENIED_CARD_INACTIVE"
    await ledger_ok(client, admin_headers, p)
