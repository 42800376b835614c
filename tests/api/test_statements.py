"""Managed-account statements (contract §5.7 managedAccountStatement, §5.8, §6 Statement; D5, D11;
docs/decisions/0009) on both versions: order, balances and signs, each filter, paging, the entry
shape of each version, CSV and PDF by the `accept` header, and the refusals."""

from __future__ import annotations

import csv
import io
import itertools
import re
import zlib
from typing import Any

import httpx
import pytest

from tests.api.test_factors import assert_step_up_required, enrol_sms
from tests.conftest import Prog
from tests.factories import Identity, deposit, login, open_account, otp_step_up, verified

LATEST, V310 = "/multi", "/3.1.0/multi"
BOTH = pytest.mark.parametrize("base", [LATEST, V310])


async def advance(client: httpx.AsyncClient, p: Prog, seconds: int) -> None:
    r = await client.post(
        "/simulate/api/clock/advance",
        headers={"programme-key": p.api_key},
        json={"seconds": seconds},
    )
    assert r.status_code == 200, r.text


async def charge_fee(
    client: httpx.AsyncClient, ident: Identity, account_id: str, base: str
) -> None:
    r = await client.post(
        f"{base}/{ident.kind}/fees/charge",
        headers=ident.headers,
        json={"feeType": "ADMIN_FEE", "source": {"type": "managed_accounts", "id": account_id}},
    )
    assert r.status_code in (200, 204), r.text


async def deposit_from(client: httpx.AsyncClient, p: Prog, account_id: str, amount: int) -> None:
    r = await client.post(
        f"/simulate/api/accounts/{account_id}/deposit",
        headers={"programme-key": p.api_key},
        json={
            "depositAmount": {"currency": "EUR", "amount": amount},
            "senderName": "Ada Sender",
            "reference": "INV-42",
        },
    )
    assert r.json() == {"code": "COMPLETED"}, r.text


async def statement(
    client: httpx.AsyncClient, ident: Identity, account_id: str, base: str, **params: Any
) -> dict[str, Any]:
    r = await client.get(
        f"{base}/managed_accounts/{account_id}/statement", headers=ident.headers, params=params
    )
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/json")
    body: dict[str, Any] = r.json()
    assert body["responseCount"] == len(body["entry"])
    return body


def kinds(body: dict[str, Any]) -> list[str]:
    return [e["transactionId"]["type"] for e in body["entry"]]


def amounts(body: dict[str, Any]) -> list[int]:
    return [e["transactionAmount"]["amount"] for e in body["entry"]]


async def funded(
    client: httpx.AsyncClient, programme: Any, base: str, spread: int = 0
) -> tuple[Prog, Identity, str]:
    """Account opened, deposit 1000, fee 100, deposit 500 (with sender and reference); the
    simulator clock moves `spread` seconds between the four."""
    p = await programme()
    ident = await verified(client, p, "corporates", base)
    acc = (await open_account(client, ident, "EUR", base))["id"]
    for step in range(3):
        if spread:
            await advance(client, p, spread)
        if step == 0:
            assert await deposit(client, p, acc, 1000) == "COMPLETED"
        elif step == 1:
            await charge_fee(client, ident, acc, base)
        else:
            await deposit_from(client, p, acc, 500)
    return p, ident, acc


@BOTH
async def test_newest_first_signed_amounts_and_balances_after(
    client, programme, admin_headers, base
):
    p, ident, acc = await funded(client, programme, base)
    body = await statement(client, ident, acc, base)
    assert kinds(body) == ["DEPOSIT", "CHARGE_FEE", "DEPOSIT", "INSTRUMENT_CREATE"]
    assert amounts(body) == [500, -100, 1000, 0]  # debits negative
    assert [e["balanceAfter"] for e in body["entry"]] == [
        {"currency": "EUR", "amount": a} for a in (1400, 900, 1000, 0)
    ]
    assert body["count"] == body["responseCount"] == 4
    stamps = [e["processedTimestamp"] for e in body["entry"]]
    assert stamps == sorted(stamps, reverse=True)
    assert body["entry"][0]["additionalFields"] == {"sender": "Ada Sender", "reference": "INV-42"}
    assert body["entry"][1]["additionalFields"]["chargeFeeType"] == "ADMIN_FEE"
    assert all(e["transactionId"]["id"].isdigit() for e in body["entry"])

    asc = await statement(client, ident, acc, base, orderByTimestamp="ASC")
    assert asc["entry"] == body["entry"][::-1]
    desc = await statement(client, ident, acc, base, orderByTimestamp="DESC")
    assert desc["entry"] == body["entry"]

    # The last entry's balance is the account's balance.
    r = await client.get(f"{base}/managed_accounts/{acc}", headers=ident.headers)
    assert r.json()["balances"]["actualBalance"] == body["entry"][0]["balanceAfter"]["amount"]
    r = await client.get(f"/portal/api/programmes/{p.id}/ledger/verify", headers=admin_headers)
    assert r.json() == {"ok": True, "violations": []}


@BOTH
async def test_each_version_has_its_own_entry_shape(client, programme, base):
    _, ident, acc = await funded(client, programme, base)
    fee = (await statement(client, ident, acc, base))["entry"][1]
    eur = {"currency": "EUR"}
    if base == LATEST:
        assert set(fee) == {
            "transactionId",
            "entryState",
            "transactionAmount",
            "availableBalanceAdjustment",
            "actualBalanceAdjustment",
            "balanceAfter",
            "availableBalanceAfter",
            "actualBalanceAfter",
            "transactionFee",
            "cardholderFee",
            "processedTimestamp",
            "additionalFields",
        }
        assert fee["entryState"] == "COMPLETED"
        assert fee["availableBalanceAdjustment"] == {**eur, "amount": -100}
        assert fee["actualBalanceAdjustment"] == {**eur, "amount": -100}
        assert fee["availableBalanceAfter"] == {**eur, "amount": 900}
        assert fee["actualBalanceAfter"] == {**eur, "amount": 900}
        assert fee["transactionFee"] == {**eur, "amount": 0}
    else:
        assert set(fee) == {
            "transactionId",
            "transactionAmount",
            "balanceAfter",
            "cardholderFee",
            "processedTimestamp",
            "additionalFields",
        }
    assert fee["transactionId"]["type"] == "CHARGE_FEE"
    assert fee["transactionAmount"] == {**eur, "amount": -100}
    assert fee["balanceAfter"] == {**eur, "amount": 900}
    assert fee["cardholderFee"] == {**eur, "amount": 0}


@BOTH
async def test_time_bounds_are_inclusive(client, programme, base):
    _, ident, acc = await funded(client, programme, base, spread=100)
    t = [e["processedTimestamp"] for e in (await statement(client, ident, acc, base))["entry"]]
    t.reverse()  # opened, deposit, fee, deposit: 100 s apart
    assert all(b - a >= 100_000 for a, b in itertools.pairwise(t))

    body = await statement(client, ident, acc, base, fromTimestamp=t[1])
    assert kinds(body) == ["DEPOSIT", "CHARGE_FEE", "DEPOSIT"]
    assert body["count"] == 3
    body = await statement(client, ident, acc, base, toTimestamp=t[2])
    assert kinds(body) == ["CHARGE_FEE", "DEPOSIT", "INSTRUMENT_CREATE"]
    body = await statement(client, ident, acc, base, fromTimestamp=t[1], toTimestamp=t[2])
    assert amounts(body) == [-100, 1000]
    body = await statement(
        client, ident, acc, base, fromTimestamp=t[1] + 1, toTimestamp=t[3] - 1, limit=1
    )
    assert amounts(body) == [-100]
    assert body["count"] == 1
    body = await statement(client, ident, acc, base, fromTimestamp=t[3] + 1)
    assert body == {"entry": [], "count": 0, "responseCount": 0}
    body = await statement(client, ident, acc, base, fromTimestamp=t[2], toTimestamp=t[1])
    assert body["count"] == 0


@BOTH
async def test_fund_movements_only_leaves_out_account_events(client, programme, base):
    _, ident, acc = await funded(client, programme, base)
    for action in ("block", "unblock"):
        r = await client.post(f"{base}/managed_accounts/{acc}/{action}", headers=ident.headers)
        assert r.status_code == 204, r.text
    everything = await statement(client, ident, acc, base)
    assert kinds(everything) == [
        "INSTRUMENT_UNBLOCK",
        "INSTRUMENT_BLOCK",
        "DEPOSIT",
        "CHARGE_FEE",
        "DEPOSIT",
        "INSTRUMENT_CREATE",
    ]
    assert [e["balanceAfter"]["amount"] for e in everything["entry"][:2]] == [1400, 1400]
    money = await statement(client, ident, acc, base, showFundMovementsOnly="true")
    assert kinds(money) == ["DEPOSIT", "CHARGE_FEE", "DEPOSIT"]
    assert money["count"] == 3
    paged = await statement(client, ident, acc, base, showFundMovementsOnly=True, limit=2)
    assert (paged["count"], paged["responseCount"]) == (3, 2)
    off = await statement(client, ident, acc, base, showFundMovementsOnly="false")
    assert off["count"] == 6


async def test_paging_counts_the_cap_and_a_multi_page_pdf(client, programme):
    p = await programme()
    ident = await verified(client, p, "consumers", LATEST)
    acc = (await open_account(client, ident, "EUR", LATEST))["id"]
    for i in range(1, 111):
        assert await deposit(client, p, acc, i) == "COMPLETED"
    total = 111  # 110 deposits and the opening

    first = await statement(client, ident, acc, LATEST)
    assert (first["count"], first["responseCount"]) == (total, 100)
    assert amounts(first)[:3] == [110, 109, 108]
    assert first["entry"][0]["balanceAfter"]["amount"] == 110 * 111 // 2
    capped = await statement(client, ident, acc, LATEST, limit=500)
    assert capped["entry"] == first["entry"]
    rest = await statement(client, ident, acc, LATEST, offset=100, limit=100)
    assert (rest["count"], rest["responseCount"]) == (total, 11)
    assert kinds(rest)[-1] == "INSTRUMENT_CREATE"
    whole = first["entry"] + rest["entry"]
    ids = [e["transactionId"]["id"] for e in whole]
    assert len(set(ids)) == total

    middle = await statement(client, ident, acc, LATEST, offset=10, limit=5)
    assert middle["entry"] == whole[10:15]
    assert (middle["count"], middle["responseCount"]) == (total, 5)
    asc = await statement(client, ident, acc, LATEST, orderByTimestamp="ASC", offset=1, limit=3)
    assert asc["entry"] == whole[::-1][1:4]
    beyond = await statement(client, ident, acc, LATEST, offset=500)
    assert beyond == {"entry": [], "count": total, "responseCount": 0}

    r = await client.get(
        f"{LATEST}/managed_accounts/{acc}/statement",
        headers={**ident.headers, "accept": "application/pdf"},
    )
    assert r.status_code == 200
    assert len(re.findall(rb"/Type\s*/Page(?![a-zA-Z])", r.content)) >= 2
    text = pdf_text(r.content)
    assert "1-100 of 111, newest first" in text
    assert re.search(r"Page 2 of\s*\d", text)


def pdf_text(pdf: bytes) -> str:
    """The text drawn by the PDF's content streams (deflated with zlib, or stored plain),
    without any PDF library: the strings shown by Tj operators, one per line. Streams are cut
    by their `/Length`, as a compressed stream may end in any byte."""
    shown: list[str] = []
    for m in re.finditer(rb"/Length (\d+)[^>]*>>\s*stream\r?\n", pdf):
        raw = pdf[m.end() : m.end() + int(m.group(1))]
        try:
            data = zlib.decompress(raw)
        except zlib.error:
            data = raw
        for literal in re.findall(rb"\(((?:\\.|[^\\)])*)\)\s*Tj", data):
            unescaped = re.sub(rb"\\([()\\])", rb"\1", literal)
            shown.append(unescaped.decode("latin-1"))
    return "\n".join(shown)


@BOTH
async def test_csv_has_a_row_per_json_entry(client, programme, base):
    _, ident, acc = await funded(client, programme, base)
    body = await statement(client, ident, acc, base, limit=3)
    r = await client.get(
        f"{base}/managed_accounts/{acc}/statement",
        headers={**ident.headers, "accept": "text/csv; charset=utf-8"},
        params={"limit": 3},
    )
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/csv")
    assert f'filename="statement-{acc}.csv"' in r.headers["content-disposition"]
    reader = csv.DictReader(io.StringIO(r.text))
    rows = list(reader)
    assert len(rows) == len(body["entry"]) == 3
    header = reader.fieldnames or []
    assert ("entryState" in header) is (base == LATEST)
    assert ("availableBalanceAfter.amount" in header) is (base == LATEST)
    for row, entry in zip(rows, body["entry"], strict=True):
        assert row["transactionId.type"] == entry["transactionId"]["type"]
        assert row["transactionId.id"] == entry["transactionId"]["id"]
        assert int(row["transactionAmount.amount"]) == entry["transactionAmount"]["amount"]
        assert row["transactionAmount.currency"] == "EUR"
        assert int(row["balanceAfter.amount"]) == entry["balanceAfter"]["amount"]
        assert int(row["processedTimestamp"]) == entry["processedTimestamp"]
        for key, value in entry["additionalFields"].items():
            assert row[f"additionalFields.{key}"] == value
    assert rows[0]["additionalFields.sender"] == "Ada Sender"
    assert rows[1]["additionalFields.chargeFeeType"] == "ADMIN_FEE"
    assert rows[1]["additionalFields.sender"] == ""
    if base == LATEST:
        assert rows[1]["entryState"] == "COMPLETED"
        assert rows[1]["availableBalanceAfter.amount"] == "900"

    r = await client.get(
        f"{base}/managed_accounts/{acc}/statement",
        headers={**ident.headers, "accept": "text/csv"},
        params={"fromTimestamp": 2**62},
    )
    assert r.status_code == 200
    assert len(list(csv.reader(io.StringIO(r.text)))) == 1  # the header row alone


@BOTH
async def test_pdf_is_a_readable_statement(client, programme, base):
    _, ident, acc = await funded(client, programme, base)
    r = await client.get(
        f"{base}/managed_accounts/{acc}/statement",
        headers={**ident.headers, "accept": "application/pdf, */*;q=0.1"},
    )
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/pdf"
    assert f'filename="statement-{acc}.pdf"' in r.headers["content-disposition"]
    assert r.content.startswith(b"%PDF")
    assert r.content.rstrip().endswith(b"%%EOF")
    text = pdf_text(r.content)
    assert "Account statement" in text
    assert acc in text
    assert "Main" in text  # friendly name
    for shown in ("10.00 EUR", "-1.00 EUR", "5.00 EUR", "14.00 EUR", "Deposit from Ada Sender"):
        assert shown in text, shown
    assert "Fee ADMIN_FEE" in text
    assert re.search(r"Page 1 of\s*1\b", text)
    assert "Period" in text and "all" in text

    ts = (await statement(client, ident, acc, base))["entry"][1]["processedTimestamp"]
    r = await client.get(
        f"{base}/managed_accounts/{acc}/statement",
        headers={**ident.headers, "accept": "application/pdf"},
        params={"fromTimestamp": ts, "showFundMovementsOnly": "true"},
    )
    text = pdf_text(r.content)
    assert "UTC to now" in text
    assert "-1.00 EUR" in text and "10.00 EUR" not in text


ACCEPTS = [
    # Missing, unknown, wildcard, refused (q=0) or malformed: JSON.
    (None, "application/json"),
    ("application/xml", "application/json"),
    ("text/html;q=0.9", "application/json"),
    ("*/*", "application/json"),
    ("application/pdf;q=0", "application/json"),
    ("garbage;;q=x, ,", "application/json"),
    # Parameters, case and q-values; the earlier type wins a tie.
    ("text/csv", "text/csv"),
    ("TEXT/CSV;charset=UTF-8", "text/csv"),
    ("application/json;q=0.5, text/csv", "text/csv"),
    ("text/csv;q=0.4, application/pdf;q=0.8", "application/pdf"),
    ("application/json, application/pdf", "application/json"),
]


@BOTH
async def test_accept_header_picks_json_csv_or_pdf(client, programme, base):
    p = await programme()
    ident = await verified(client, p, "corporates", base)
    acc = (await open_account(client, ident, "EUR", base))["id"]
    for accept, expected in ACCEPTS:
        headers = dict(ident.headers)
        if accept is not None:
            headers["accept"] = accept
        r = await client.get(f"{base}/managed_accounts/{acc}/statement", headers=headers)
        assert r.status_code == 200, r.text
        assert r.headers["content-type"].startswith(expected), (accept, r.headers)
        if expected == "application/json":
            assert r.json()["count"] == 1


@BOTH
async def test_several_accept_lines_the_last_one_wins(client, programme, base):
    """D11a: a client generated from the description sends its own `Accept: application/json`
    and then the operation's `accept` parameter as a second line; the caller chose the last."""
    p = await programme()
    ident = await verified(client, p, "corporates", base)
    acc = (await open_account(client, ident, "EUR", base))["id"]
    url = f"{base}/managed_accounts/{acc}/statement"
    for lines, expected in (
        (["application/json", "text/csv"], "text/csv"),
        (["application/json", "application/pdf"], "application/pdf"),
        (["text/csv", "application/json"], "application/json"),
        (["application/pdf", "text/csv;q=0.2, application/json;q=0.9"], "application/json"),
    ):
        headers = [*ident.headers.items(), *(("accept", line) for line in lines)]
        r = await client.get(url, headers=headers)
        assert r.status_code == 200, r.text
        assert r.headers["content-type"].startswith(expected), (lines, r.headers)
    csv = await client.get(
        url,
        headers=[*ident.headers.items(), ("accept", "application/json"), ("accept", "text/csv")],
    )
    assert csv.text.splitlines()[0].startswith("transactionId"), csv.text[:200]


def invalid(r: httpx.Response) -> set[str]:
    assert r.status_code == 400, r.text
    return {f["fieldName"] for f in r.json()["syntaxErrors"]["invalidFields"]}


@BOTH
async def test_refusals(client, programme, base):
    p = await programme()
    ident = await verified(client, p, "corporates", base)
    other = await verified(client, p, "consumers", base)
    acc = (await open_account(client, ident, "EUR", base))["id"]
    url = f"{base}/managed_accounts/{acc}/statement"

    r = await client.get(url, headers=other.headers)  # another identity's account
    assert r.status_code == 404
    r = await client.get(url, headers={**other.headers, "accept": "application/pdf"})
    assert r.status_code == 404
    r = await client.get(f"{base}/managed_accounts/987654321/statement", headers=ident.headers)
    assert r.status_code == 404
    r = await client.get(f"{base}/managed_accounts/{2**70}/statement", headers=ident.headers)
    assert r.status_code == 404
    r = await client.get(url, headers=p.headers)  # no token
    assert r.status_code == 401
    r = await client.get(url, headers={"Authorization": ident.headers["Authorization"]})
    assert r.status_code == 400  # no api-key
    r = await client.get(url, headers={**ident.headers, "api-key": "nope"})
    assert r.status_code == 401
    q = await programme()
    r = await client.get(url, headers={**ident.headers, "api-key": q.api_key})
    assert r.status_code == 403  # a token of another programme

    for params, field in (
        ({"limit": 0}, "limit"),
        ({"offset": -1}, "offset"),
        ({"orderByTimestamp": "UP"}, "orderByTimestamp"),
        ({"fromTimestamp": "abc"}, "fromTimestamp"),
        ({"toTimestamp": -5}, "toTimestamp"),
        ({"showFundMovementsOnly": "maybe"}, "showFundMovementsOnly"),
        ({"offset": 2**31}, "offset"),
    ):
        r = await client.get(url, headers=ident.headers, params=params)
        assert field in invalid(r), (params, r.text)
    r = await client.get(url, headers=ident.headers, params={"orderByTimestamp": "UP"})
    error = r.json()["syntaxErrors"]["invalidFields"][0]
    assert error["error"] == "IN"
    assert error["params"] == ["ASC", "DESC"]
    # The account is still there, untouched, for its owner.
    assert (await statement(client, ident, acc, base))["count"] == 1


async def test_step_up_is_demanded_on_both_versions_when_the_programme_wants_it(client, programme):
    """docs/decisions/0007: like the other account reads, on both versions (one session)."""
    p = await programme(stepUpRequired=True)
    ident = await verified(client, p, "corporates", LATEST)
    await enrol_sms(client, ident.headers)
    await otp_step_up(client, ident.headers)
    acc = (await open_account(client, ident, "EUR", LATEST))["id"]
    for base in (LATEST, V310):
        assert (await statement(client, ident, acc, base))["count"] == 1
    r = await login(client, p, ident.email)
    assert r.status_code == 200, r.text
    fresh = {**p.headers, "Authorization": f"Bearer {r.json()['token']}"}
    for base in (LATEST, V310):
        for accept in ("application/json", "text/csv", "application/pdf"):
            r = await client.get(
                f"{base}/managed_accounts/{acc}/statement", headers={**fresh, "accept": accept}
            )
            assert_step_up_required(r)
