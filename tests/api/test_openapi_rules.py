"""The descriptions state the rules the server enforces (issue 32 §3.5): a client generated from
them, or a validating proxy in front of the server, refuses what the server refuses and lets
through what it takes. Each rule is checked both ways: the served description's schema and the
server's own answer to the same request agree.
"""

from __future__ import annotations

from typing import Any

import httpx
from jsonschema_rs import Draft202012Validator

from tests.api.payments_support import customer
from tests.conftest import Prog
from tests.openapi_conformance import BASES

INT64_MAX = 2**63 - 1


def floats(node: Any, path: str = "") -> list[str]:
    if isinstance(node, float):
        return [f"{path} = {node!r}"]
    if isinstance(node, dict):
        return [f for k, v in node.items() for f in floats(v, f"{path}/{k}")]
    if isinstance(node, list):
        return [f for i, v in enumerate(node) for f in floats(v, f"{path}/{i}")]
    return []


async def test_no_bound_is_a_float_and_the_amount_maximum_is_int64s(client):
    """An amount's maximum is 2^63 - 1 (written as the float 9.223372036854776e18, it was 2^63,
    which no int64 holds); no number of any description is a float."""
    for base in BASES:
        doc = (await client.get(f"{base}/openapi.json")).json()
        assert floats(doc) == [], base
    doc = (await client.get("/multi/openapi.json")).json()
    text = (await client.get("/multi/openapi.json")).text
    assert "e+18" not in text and "9223372036854775807" in text
    amount = doc["components"]["schemas"]["CurrencyAmount-Input"]["properties"]["amount"]
    assert (amount["minimum"], amount["maximum"]) == (-(2**63), INT64_MAX)


def body_schema(doc: dict[str, Any], path: str) -> Draft202012Validator:
    schema = doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
    return Draft202012Validator({**schema, "components": doc["components"]})


async def agree(
    client: httpx.AsyncClient,
    doc: dict[str, Any],
    path: str,
    headers: dict[str, str],
    body: dict[str, Any],
    valid: bool,
) -> None:
    """The description calls `body` valid exactly when the server does not answer it 400."""
    declared = body_schema(doc, path).is_valid(body)
    r = await client.post(f"/multi{path}", headers=headers, json=body)
    assert (declared, r.status_code != 400) == (valid, valid), (body, r.status_code, r.text)


async def test_a_password_with_a_nul_is_refused_by_the_description_too(client, programme):
    p: Prog = await programme()
    doc = (await client.get("/multi/openapi.json")).json()
    password = doc["components"]["schemas"]["SensitivePassword"]["properties"]["value"]
    assert password["format"] == "password" and password["pattern"] == "^[^\\u0000]*$"
    for value, valid in (("Sandbox-Pa55", True), ("Sandbox\u0000Pa55", False)):
        await agree(
            client, doc, "/passwords/validate", p.headers, {"password": {"value": value}}, valid
        )


async def test_reserved_email_domains_are_stated(client, programme):
    p: Prog = await programme()
    doc = (await client.get("/multi/openapi.json")).json()
    email = doc["components"]["schemas"]["EmailRequest"]["properties"]["email"]
    for domain in (".test", ".localhost", ".invalid", ".local", ".onion", ".arpa"):
        assert f"`{domain}`" in email["description"], domain
    path = "/multi/corporates/verification/email/send"
    for address in ("ada@example.test", "ada@host.localhost", "ada@nodot"):
        r = await client.post(path, headers=p.headers, json={"email": address})
        assert r.status_code == 400, (address, r.text)


async def test_the_wire_transfer_schema_states_the_scheme_rules(client, programme):
    """SEPA needs a reference that is not blank; Faster Payments takes at most 18 characters
    and names of its own characters; every name has text; an IBAN's check digits are said."""
    p: Prog = await programme()
    ident, acc = await customer(client, p, sms=False)  # no money: a valid body is a 409
    doc = (await client.get("/multi/openapi.json")).json()

    def wire(details: dict[str, str], name: str = "Ada Lovelace", **over: Any) -> dict[str, Any]:
        out: dict[str, Any] = {
            "profileId": p.profiles["outgoingWireTransfers"],
            "sourceInstrument": {"type": "managed_accounts", "id": acc},
            "transferAmount": {"currency": "EUR", "amount": 100},
            "destinationBeneficiary": {"name": name, "bankAccountDetails": details},
        }
        out.update(over)
        return out

    sepa = {"iban": "DE89370400440532013000", "bankIdentifierCode": "COBADEFFXXX"}
    fps = {"accountNumber": "12345678", "sortCode": "400400"}
    cases = [
        (wire(sepa, description="Invoice 42"), True),
        (wire(sepa), False),  # SEPA: the reference is required
        (wire(sepa, description=" \t\u3000"), False),  # ... and not blank
        (wire(sepa, description="x" * 35), True),
        (wire(sepa, description="x" * 36), False),
        (wire(sepa, name="Zoë Ångström", description="Rent"), True),
        (wire(sepa, name="   ", description="Rent"), False),  # a name has text
        (wire(fps), True),  # Faster Payments: the reference is optional
        (wire(fps, description="x" * 18), True),
        (wire(fps, description="x" * 19), False),  # ... and at most 18
        (wire(fps, name="Zoë Ångström"), False),  # ... names of its own characters
        (wire(fps, name="Ada Lovelace & Co. (UK)"), True),
        (wire(fps, name="Ada\n"), False),
    ]
    for body, valid in cases:
        await agree(client, doc, "/outgoing_wire_transfers", ident.headers, body, valid)
    iban = doc["components"]["schemas"]["SepaBankDetails"]["properties"]["iban"]
    assert "check digits" in iban["description"]
    description = doc["components"]["schemas"]["OwtCreate"]["properties"]["description"]
    assert "SEPA (EUR): required" in str(description)
