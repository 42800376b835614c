"""A JSON body that repeats a key is a 400 on every base (issue 32 §2.10, D11b): a lenient
parser keeps the last value, so a payment of 999 went through where a validating proxy saw 100.

The bodies are written as text here (a JSON encoder cannot repeat a key)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.api.payments_support import balances, customer
from tests.conftest import BASES, Prog
from tests.factories import PASSWORD, open_account, sign_up

PORTAL = "/portal/api/programmes"
SIM = "/simulate/api"
JSON = {"content-type": "application/json"}


def obj(*pairs: tuple[str, Any]) -> str:
    """A JSON object's text with `pairs` as given, repeats and all; a value that is already
    text (`Raw`) is put in as it is."""
    return (
        "{"
        + ", ".join(
            f"{json.dumps(k)}: {v if isinstance(v, Raw) else json.dumps(v)}" for k, v in pairs
        )
        + "}"
    )


class Raw(str):
    pass


def refused_for(r: httpx.Response, field: str) -> None:
    assert r.status_code == 400, r.text
    assert r.json() == {
        "message": f"Malformed JSON request body: the key {field} appears more than once.",
        "syntaxErrors": {
            "invalidFields": [{"fieldName": field, "error": "EXACTLY", "params": ["1"]}]
        },
    }, r.text


@pytest.mark.parametrize("base", BASES)
async def test_every_base_refuses_a_repeated_key(client, programme, base):
    p: Prog = await programme()
    ident = await sign_up(client, p, "consumers", base)
    url = f"{base}/login_with_password"
    headers = {**p.headers, **JSON}
    password = obj(("value", PASSWORD))
    # The right e-mail first, another second: whichever a parser kept, it is refused.
    body = obj(("email", ident.email), ("password", Raw(password)), ("email", "x@example.com"))
    refused_for(await client.post(url, headers=headers, content=body), "email")
    nested = obj(
        ("email", ident.email), ("password", Raw(obj(("value", "a"), ("value", PASSWORD))))
    )
    refused_for(await client.post(url, headers=headers, content=nested), "password.value")
    # Unknown fields are ignored, but not a repeat in them, however deep.
    deep = Raw(obj(("a", Raw("[1, " + obj(("b", 1), ("b", 2)) + "]"))))
    body = obj(("email", ident.email), ("password", Raw(password)), ("extra", deep))
    refused_for(await client.post(url, headers=headers, content=body), "extra.a[1].b")
    # The same body without the repeat logs in.
    body = obj(("email", ident.email), ("password", Raw(password)))
    r = await client.post(url, headers=headers, content=body)
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("base", BASES[:2])
async def test_a_payment_with_two_amounts_moves_nothing(client, programme, base):
    p: Prog = await programme()
    ident, src = await customer(client, p, funds=10_000, sms=False)
    dst = (await open_account(client, ident, "EUR", base))["id"]
    amount = obj(("currency", "EUR"), ("amount", 100), ("amount", 999))
    body = obj(
        ("profileId", p.profiles["transfers"]),
        ("source", Raw(obj(("type", "managed_accounts"), ("id", src)))),
        ("destination", Raw(obj(("type", "managed_accounts"), ("id", dst)))),
        ("destinationAmount", Raw(amount)),
    )
    headers = {**ident.headers, **JSON}
    r = await client.post(f"{base}/transfers", headers=headers, content=body)
    refused_for(r, "destinationAmount.amount")
    # With an idempotency-ref too: refused before anything is claimed.
    r = await client.post(
        f"{base}/transfers", headers={**headers, "idempotency-ref": "dup-1"}, content=body
    )
    refused_for(r, "destinationAmount.amount")
    assert await balances(client, ident, src) == (10_000, 10_000)
    assert (await client.get(f"{base}/transfers", headers=ident.headers)).json()["count"] == 0
    single = body.replace(', "amount": 999', "")
    r = await client.post(
        f"{base}/transfers", headers={**headers, "idempotency-ref": "dup-1"}, content=single
    )
    assert r.status_code == 200, r.text
    assert await balances(client, ident, src) == (9_900, 9_900)


async def test_the_simulator_refuses_a_repeated_key(client, programme):
    p: Prog = await programme()
    ident, acc = await customer(client, p, sms=False)
    amount = obj(("currency", "EUR"), ("amount", 100), ("amount", 999))
    headers = {"programme-key": p.api_key, **JSON}
    url = f"{SIM}/accounts/{acc}/deposit"
    r = await client.post(url, headers=headers, content=obj(("depositAmount", Raw(amount))))
    refused_for(r, "depositAmount.amount")
    body = obj(
        ("depositAmount", Raw(obj(("currency", "EUR"), ("amount", 100)))),
        ("senderName", "Ada"),
        ("senderName", "Eve"),
    )
    refused_for(await client.post(url, headers=headers, content=body), "senderName")
    assert await balances(client, ident, acc) == (0, 0)
    r = await client.post(
        f"{SIM}/clock/advance", headers=headers, content=obj(("seconds", 1), ("seconds", 10**6))
    )
    refused_for(r, "seconds")


async def test_the_operator_api_refuses_a_repeated_key(client, programme, admin_headers):
    p: Prog = await programme()
    url = f"{PORTAL}/{p.id}/settings"
    headers = {**admin_headers, **JSON}
    body = obj(("passwordExpiryDays", 30), ("passwordExpiryDays", None))
    refused_for(await client.patch(url, headers=headers, content=body), "passwordExpiryDays")
    r = await client.get(f"{PORTAL}/{p.id}", headers=admin_headers)
    assert r.json()["settings"]["passwordExpiryDays"] is None  # unchanged
    r = await client.post(
        PORTAL,
        headers=headers,
        content=obj(("name", "dup-a"), ("name", "dup-b"), ("mode", "sandbox")),
    )
    refused_for(r, "name")


async def test_a_key_no_answer_can_carry_is_escaped(client, programme):
    """A repeated key that is a lone surrogate (valid JSON, not Unicode): named escaped, never
    a 500; a very long one is shortened."""
    p: Prog = await programme()
    headers = {**p.headers, **JSON}
    body = '{"\\ud800": 1, "\\ud800": 2}'
    r = await client.post("/multi/login_with_password", headers=headers, content=body)
    refused_for(r, "\\ud800")
    long = "k" * 5000
    body = obj((long, 1), (long, 2))
    r = await client.post("/multi/login_with_password", headers=headers, content=body)
    assert r.status_code == 400, r.text
    assert r.json()["syntaxErrors"]["invalidFields"][0]["fieldName"] == "k" * 100 + "…"
    assert len(r.json()["message"]) <= 255
