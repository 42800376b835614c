"""The card pool and assign (D31, cards.md §3.14), black-box: pool cards made through the CLI
and the operator API, claimed with `POST /managed_cards/assign` on `/multi` and `/3.29.1/multi`
(3.1.0 has none), each refusal, each refused caller, step-up, idempotency, a card that expired
in the pool, and two assigns of one reference at once."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import httpx

from tests.api.test_card_lifecycle import advance_to, month_start
from tests.api.test_managed_cards import BASES, LATEST, V3291, get, listed
from tests.api.test_stepup_accounts import enrol_sms
from tests.conftest import Prog
from tests.factories import Identity, otp_step_up, sign_up, verified
from tests.test_cli import cli, cli_env, ok  # noqa: F401 (the fixture)

PORTAL = "/portal/api/programmes"
REFERENCE = re.compile(r"^[A-Z0-9]{16}$")
CODE = re.compile(r"^[0-9]{8}$")


def prepaid(p: Prog, kind: str) -> str:
    return p.profiles[f"{kind}PrepaidManagedCard"]


async def portal_pool(
    client: httpx.AsyncClient, admin: dict[str, str], p: Prog, **body: Any
) -> httpx.Response:
    return await client.post(f"{PORTAL}/{p.id}/card_pool", headers=admin, json=body)


async def make_pool(
    client: httpx.AsyncClient, admin: dict[str, str], p: Prog, kind: str = "corporate", n: int = 1
) -> list[dict[str, str]]:
    r = await portal_pool(client, admin, p, profileId=prepaid(p, kind), count=n)
    assert r.status_code == 201, r.text
    cards: list[dict[str, str]] = r.json()["cards"]
    return cards


async def pool_state(client: httpx.AsyncClient, admin: dict[str, str], p: Prog) -> dict[str, Any]:
    r = await client.get(f"{PORTAL}/{p.id}/card_pool", headers=admin)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def assign_body(pool_card: dict[str, str], **over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "externalReference": pool_card["externalReference"],
        "activationCode": pool_card["activationCode"],
        "friendlyName": "Pool card",
        "nameOnCard": "Grace Hopper",
        "cardholderMobileNumber": "+35699123456",
        "billingAddress": {
            "addressLine1": "2 Compiler Road",
            "city": "Valletta",
            "postCode": "VLT 1000",
            "country": "MT",
        },
    }
    body.update(over)
    return {k: v for k, v in body.items() if v is not None}


async def assign(
    client: httpx.AsyncClient,
    ident: Identity,
    pool_card: dict[str, str],
    base: str = LATEST,
    headers: dict[str, str] | None = None,
    **over: Any,
) -> httpx.Response:
    return await client.post(
        f"{base}/managed_cards/assign",
        headers={**ident.headers, **(headers or {})},
        json=assign_body(pool_card, **over),
    )


def refused(r: httpx.Response, code: str) -> bool:
    return r.status_code == 409 and r.json()["errorCode"] == code


async def programme_name(client: httpx.AsyncClient, admin: dict[str, str], p: Prog) -> str:
    r = await client.get(f"{PORTAL}/{p.id}", headers=admin)
    assert r.status_code == 200, r.text
    name: str = r.json()["name"]
    return name


async def test_pool_cards_made_by_the_cli_are_claimed_by_assign(
    cli_env,  # noqa: F811
    client,
    programme,
    admin_headers,
):
    p = await programme()
    name = await programme_name(client, admin_headers, p)
    made = json.loads(
        ok(
            await cli(
                "cards", "pool", "create", "--programme", name,
                "--profile", prepaid(p, "corporate"), "--count", "2", "--currency", "EUR", "--json",
            )
        )
    )  # fmt: skip
    assert len(made) == 2 and made[0]["externalReference"] != made[1]["externalReference"]
    for card in made:
        assert set(card) == {"externalReference", "activationCode"}
        assert REFERENCE.match(card["externalReference"]) and CODE.match(card["activationCode"])
    # Without --json: one card a line, reference and code.
    lines = ok(
        await cli(
            "cards", "pool", "create", "--programme", name,
            "--profile", prepaid(p, "corporate"), "--count", "1",
        )
    ).splitlines()  # fmt: skip
    assert len(lines) == 1
    reference, code = lines[0].split("\t")
    assert REFERENCE.match(reference) and CODE.match(code)

    state = await pool_state(client, admin_headers, p)
    assert state["unassigned"] == 3 and len(state["cards"]) == 3
    for entry in state["cards"]:
        assert "activationCode" not in entry and "cardNumber" not in entry
        assert entry["cardNumberFirstSix"] == "555555" and len(entry["cardNumberLastFour"]) == 4
        assert entry["identityType"] == "CORPORATE"
        assert entry["profileId"] == prepaid(p, "corporate")
    assert {e["externalReference"] for e in state["cards"]} == {
        made[0]["externalReference"],
        made[1]["externalReference"],
        reference,
    }

    ident = await verified(client, p, "corporates")
    r = await assign(client, ident, made[0])
    assert r.status_code == 200, r.text
    card = r.json()
    assert card["mode"] == "PREPAID_MODE" and card["type"] == "VIRTUAL"
    assert card["state"] == {"state": "ACTIVE"} and card["currency"] == "EUR"
    assert card["balances"] == {"availableBalance": 0, "actualBalance": 0}
    assert card["friendlyName"] == "Pool card" and card["nameOnCard"] == "Grace Hopper"
    assert card["cardholderMobileNumber"] == "+35699123456"
    assert card["billingAddress"]["addressLine1"] == "2 Compiler Road"
    assert card["profileId"] == prepaid(p, "corporate")
    assert card["cardLevelClassification"] == "CORPORATE"
    assert card["renewalType"] == "NO_RENEW" and card["expiryPeriodMonths"] == 36
    pooled = next(
        e for e in state["cards"] if e["externalReference"] == made[0]["externalReference"]
    )
    assert card["id"] == pooled["id"]
    assert card["cardNumberLastFour"] == pooled["cardNumberLastFour"]
    # The owner's card like any other: read, listed, blocked.
    assert await get(client, ident, card["id"]) == card
    assert await listed(client, ident, []) == [card["id"]]
    r = await client.post(f"{LATEST}/managed_cards/{card['id']}/block", headers=ident.headers)
    assert r.status_code == 204
    assert (await pool_state(client, admin_headers, p))["unassigned"] == 2

    # Assigned: the same reference again is unknown, to its owner and to anyone else.
    other = await verified(client, p, "corporates")
    assert refused(await assign(client, ident, made[0]), "INSTRUMENT_NOT_FOUND")
    assert refused(await assign(client, other, made[0]), "INSTRUMENT_NOT_FOUND")
    assert await listed(client, other, []) == []


async def test_the_cli_refuses_what_it_cannot_make(
    cli_env,  # noqa: F811
    client,
    programme,
    admin_headers,
):
    p = await programme()
    name = await programme_name(client, admin_headers, p)
    base = ["cards", "pool", "create", "--programme", name, "--count", "1"]
    result = await cli(*base, "--profile", p.profiles["corporateDebitManagedCard"])
    assert result.exit_code == 1 and "PAYMENT_MODEL_CONSTRAINTS_VIOLATED" in result.output
    result = await cli(*base, "--profile", p.profiles["corporate"])
    assert result.exit_code == 1 and "PROFILE_NOT_FOUND" in result.output
    result = await cli(*base, "--profile", prepaid(p, "corporate"), "--currency", "JPY")
    assert result.exit_code == 1 and "CURRENCY_NOT_SUPPORTED_BY_PROFILE" in result.output
    result = await cli(
        "cards", "pool", "create", "--programme", "no-such-programme",
        "--profile", prepaid(p, "corporate"), "--count", "1",
    )  # fmt: skip
    assert result.exit_code == 1
    result = await cli(*base[:-1], "0", "--profile", prepaid(p, "corporate"))
    assert result.exit_code == 2  # typer: out of range
    assert (await pool_state(client, admin_headers, p))["unassigned"] == 0


async def test_the_operator_api_makes_pools_and_refuses_what_it_cannot(
    client, programme, admin_headers
):
    p = await programme()
    other = await programme()
    made = await make_pool(client, admin_headers, p, "consumer", 3)
    assert len(made) == 3 and len({c["externalReference"] for c in made}) == 3
    state = await pool_state(client, admin_headers, p)
    assert state["unassigned"] == 3 and {e["identityType"] for e in state["cards"]} == {"CONSUMER"}
    r = await client.get(f"{PORTAL}/{p.id}/card_pool", headers=admin_headers, params={"limit": 1})
    assert r.json()["unassigned"] == 3 and len(r.json()["cards"]) == 1

    cases = [
        ({"profileId": p.profiles["consumerDebitManagedCard"], "count": 1},
         "PAYMENT_MODEL_CONSTRAINTS_VIOLATED"),
        ({"profileId": prepaid(other, "consumer"), "count": 1}, "PROFILE_NOT_FOUND"),
        ({"profileId": p.profiles["consumer"], "count": 1}, "PROFILE_NOT_FOUND"),
        ({"profileId": "1", "count": 1}, "PROFILE_NOT_FOUND"),
        ({"profileId": prepaid(p, "consumer"), "count": 1, "currency": "JPY"},
         "CURRENCY_NOT_SUPPORTED_BY_PROFILE"),
    ]  # fmt: skip
    for body, code in cases:
        r = await portal_pool(client, admin_headers, p, **body)
        assert refused(r, code), (body, r.text)
    for body in (
        {"profileId": prepaid(p, "consumer"), "count": 0},
        {"profileId": prepaid(p, "consumer"), "count": 1001},
        {"profileId": prepaid(p, "consumer"), "count": "2"},
        {"count": 1},
    ):
        r = await portal_pool(client, admin_headers, p, **body)
        assert r.status_code == 400, (body, r.text)
    body = {"profileId": prepaid(p, "consumer"), "count": 1}
    r = await client.post(f"{PORTAL}/{p.id}/card_pool", json=body)
    assert r.status_code == 401
    r = await client.get(f"{PORTAL}/{p.id}/card_pool")
    assert r.status_code == 401
    r = await client.post(f"{PORTAL}/{2**62}/card_pool", headers=admin_headers, json=body)
    assert r.status_code == 404
    assert (await pool_state(client, admin_headers, p))["unassigned"] == 3
    live = await programme(mode="live")
    r = await portal_pool(client, admin_headers, live, profileId=prepaid(live, "consumer"), count=1)
    assert refused(r, "PROVIDER_NOT_SUPPORTED_BY_PROFILE")


async def test_assign_refuses_each_rule_and_a_refusal_changes_nothing(
    client, programme, admin_headers
):
    p = await programme()
    other = await programme()
    [consumer_card] = await make_pool(client, admin_headers, p, "consumer")
    [elsewhere] = await make_pool(client, admin_headers, other, "consumer")
    consumer = await verified(client, p, "consumers")
    corporate = await verified(client, p, "corporates")
    unverified = await sign_up(client, p, "consumers")

    unknown = {**consumer_card, "externalReference": "NOSUCHREFERENCE1"}
    assert refused(await assign(client, consumer, unknown), "INSTRUMENT_NOT_FOUND")
    assert refused(await assign(client, consumer, elsewhere), "INSTRUMENT_NOT_FOUND")
    wrong = {**consumer_card, "activationCode": "00000000"}
    if wrong["activationCode"] == consumer_card["activationCode"]:
        wrong["activationCode"] = "11111111"
    assert refused(await assign(client, consumer, wrong), "ACTIVATION_CODE_INVALID")
    # A corporate without the code learns nothing; with it, the card is of the other type.
    assert refused(await assign(client, corporate, wrong), "ACTIVATION_CODE_INVALID")
    r = await assign(client, corporate, consumer_card)
    assert refused(r, "MODEL_CONSTRAINTS_VIOLATED")
    assert refused(await assign(client, unverified, consumer_card), "IDENTITY_NOT_VERIFIED")
    r = await assign(client, consumer, consumer_card, cardholderMobileNumber=None)
    assert refused(r, "THREEDS_DETAILS_NOT_PROVIDED")
    r = await assign(
        client, consumer, consumer_card, authForwardingDefaultTimeoutDecision="APPROVE"
    )
    assert refused(r, "AUTH_FORWARDING_NOT_ENABLED")
    for over in (
        {"externalReference": None},
        {"activationCode": None},
        {"friendlyName": None},
        {"billingAddress": None},
        {"cardholderMobileNumber": "123"},
        {"nameOnCard": "x" * 28},
        {"externalReference": 12},
    ):
        r = await assign(client, consumer, consumer_card, **over)
        assert r.status_code == 400 and "syntaxErrors" in r.json(), (over, r.text)
    for ident in (consumer, corporate, unverified):
        assert await listed(client, ident, []) == []
    assert (await pool_state(client, admin_headers, p))["unassigned"] == 1
    # Every refusal left the card in the pool: it is still there to claim.
    r = await assign(client, consumer, consumer_card, V3291)
    assert r.status_code == 200, r.text
    assert r.json()["cardLevelClassification"] == "CONSUMER"
    assert (await pool_state(client, admin_headers, p))["unassigned"] == 0


async def test_assign_refuses_callers_as_every_card_operation_does(
    client, programme, admin_headers
):
    p = await programme()
    other_p = await programme()
    [pool_card] = await make_pool(client, admin_headers, p)
    ident = await verified(client, p, "corporates")
    token = ident.headers["Authorization"]
    refusals = [
        ({}, 400),
        ({"Authorization": token}, 400),
        ({"api-key": "not-a-key", "Authorization": token}, 401),
        ({"api-key": p.api_key}, 401),
        ({"api-key": p.api_key, "Authorization": "Bearer garbage.token.here"}, 401),
        ({"api-key": other_p.api_key, "Authorization": token}, 403),
    ]
    for base in BASES:
        for headers, status in refusals:
            r = await client.post(
                f"{base}/managed_cards/assign", headers=headers, json=assign_body(pool_card)
            )
            assert r.status_code == status, (base, sorted(headers), r.status_code, r.text)
    r = await assign(client, ident, pool_card, "/3.1.0/multi")
    assert r.status_code == 404
    doc = (await client.get("/multi/openapi.json")).json()
    assert "409" in doc["paths"]["/managed_cards/assign"]["post"]["responses"]
    assert (await pool_state(client, admin_headers, p))["unassigned"] == 1


async def test_assign_needs_a_step_up_and_honours_idempotency_ref(client, programme, admin_headers):
    p = await programme()
    pool_cards = await make_pool(client, admin_headers, p, n=2)
    ident = await verified(client, p, "corporates")
    await enrol_sms(client, ident.headers)
    r = await client.patch(
        f"{PORTAL}/{p.id}/settings", headers=admin_headers, json={"stepUpRequired": True}
    )
    assert r.status_code == 200
    r = await assign(client, ident, pool_cards[0])
    assert r.status_code == 403 and r.json()["errorCode"] == "STEP_UP_REQUIRED"
    await otp_step_up(client, ident.headers)
    ref = {"idempotency-ref": "assign-1"}
    first = await assign(client, ident, pool_cards[0], headers=ref)
    again = await assign(client, ident, pool_cards[0], headers=ref)
    assert first.status_code == again.status_code == 200, (first.text, again.text)
    assert first.json() == again.json()
    # A refused first call stores nothing: the same ref then assigns.
    ref = {"idempotency-ref": "assign-2"}
    wrong = {**pool_cards[1], "activationCode": "x"}
    assert refused(await assign(client, ident, wrong, headers=ref), "ACTIVATION_CODE_INVALID")
    assert (await assign(client, ident, pool_cards[1], headers=ref)).status_code == 200
    assert len(await listed(client, ident, [])) == 2


async def test_three_wrong_activation_codes_lock_a_pool_card(client, programme, admin_headers):
    """Issue 41 §5: activation codes are limited as PINs are. Each wrong code is counted on the
    card, in the database (so across requests and processes, not in one process's memory); the
    third locks the card, which then refuses every code, the right one included, and says so to
    the operator. Other cards are not affected."""
    p = await programme()
    locked_card, other_card = await make_pool(client, admin_headers, p, n=2)
    guesser = await verified(client, p, "corporates")
    owner = await verified(client, p, "corporates")
    for guess in ("00000001", "00000002", "00000003"):
        wrong = {**locked_card, "activationCode": guess}
        if guess != locked_card["activationCode"]:
            assert refused(await assign(client, guesser, wrong), "ACTIVATION_CODE_INVALID")
    # Locked: the right code is refused too, for anyone, and the card stays in the pool.
    assert refused(await assign(client, owner, locked_card), "ACTIVATION_CODE_INVALID")
    assert refused(await assign(client, guesser, locked_card), "ACTIVATION_CODE_INVALID")
    state = await pool_state(client, admin_headers, p)
    flags = {c["externalReference"]: c["activationLocked"] for c in state["cards"]}
    assert flags == {locked_card["externalReference"]: True, other_card["externalReference"]: False}
    assert await listed(client, owner, []) == []
    # Two wrong codes and the right one: the card is claimed (a typo is not a lock).
    for guess in ("99999998", "99999999"):
        if guess != other_card["activationCode"]:
            wrong = {**other_card, "activationCode": guess}
            assert refused(await assign(client, owner, wrong), "ACTIVATION_CODE_INVALID")
    assert (await assign(client, owner, other_card)).status_code == 200


async def test_a_card_that_expired_in_the_pool_cannot_be_assigned(client, programme, admin_headers):
    p = await programme()
    [pool_card] = await make_pool(client, admin_headers, p)
    state = await pool_state(client, admin_headers, p)
    await advance_to(client, p, month_start(state["cards"][0]["expiryMmyy"], 1))
    ident = await verified(client, p, "corporates")  # signed up after the clock moved
    assert refused(await assign(client, ident, pool_card), "INSTRUMENT_NOT_FOUND")
    assert (await pool_state(client, admin_headers, p))["unassigned"] == 0


async def test_two_assigns_of_one_reference_at_once_give_it_to_one(
    client, programme, admin_headers
):
    p = await programme()
    pool_cards = await make_pool(client, admin_headers, p, n=3)
    claimants = [await verified(client, p, "corporates") for _ in range(2)]
    for pool_card in pool_cards:
        answers = await asyncio.gather(*(assign(client, who, pool_card) for who in claimants))
        statuses = sorted(r.status_code for r in answers)
        assert statuses == [200, 409], [r.text for r in answers]
        loser = next(r for r in answers if r.status_code == 409)
        assert loser.json()["errorCode"] == "INSTRUMENT_NOT_FOUND"
    owned = [await listed(client, who, []) for who in claimants]
    assert sum(len(ids) for ids in owned) == 3 and not set(owned[0]) & set(owned[1])
    assert (await pool_state(client, admin_headers, p))["unassigned"] == 0
