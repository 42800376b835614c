"""Confirmation of Payee on the 3.63 line (issue 43 §6, v3.63.md §6, D35, D40, D41, decision
0084), black-box over HTTP: a sandbox's GBP wire transfer made through `/3.63.4/multi` waits in
`PENDING_CONFIRMATION` with the sandbox's `validationOutcomes`, its money held; `confirm` moves it
on to SCA (or past it), `cancel` ends it `CANCELLED` with its money back; unconfirmed it fails
after 5 minutes of the programme clock. SEPA, a live programme's and a 3.29.1 create are not
checked, and 3.29.1 never shows the line's states. Each refused caller, each 409 and each 400."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.api.fees_support import ledger_ok
from tests.api.payments_support import advance, balances, customer, enrol_push, settings
from tests.api.test_card_funding import events
from tests.api.test_outgoing_wire_transfers import AMOUNT, FEE, FPS, body
from tests.api.test_portal_payment_detail import text
from tests.api.test_portal_web import page, signed_in_client
from tests.api.webhook_support import receiving
from tests.conftest import Prog
from tests.factories import CODE, Identity, sign_up

LINE = "/3.63.4/multi"
OWT = f"{LINE}/outgoing_wire_transfers"
FUNDS = 100_000


def gbp(p: Prog, acc: str, account_number: str = "12345678", **over: Any) -> dict[str, Any]:
    details = {**FPS, "accountNumber": account_number}
    json = body(p, acc, currency="GBP", details=details, description="Rent May")
    json.update(over)
    return json


async def gbp_customer(client: httpx.AsyncClient, p: Prog) -> tuple[Identity, str]:
    return await customer(client, p, funds=FUNDS, currency="GBP")


async def made(client: httpx.AsyncClient, ident: Identity, json: dict[str, Any]) -> dict[str, Any]:
    r = await client.post(OWT, headers=ident.headers, json=json)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


async def read(
    client: httpx.AsyncClient, ident: Identity, owt_id: str, base: str = LINE
) -> httpx.Response:
    return await client.get(f"{base}/outgoing_wire_transfers/{owt_id}", headers=ident.headers)


async def confirm(client: httpx.AsyncClient, ident: Identity, owt_id: str) -> httpx.Response:
    return await client.post(f"{OWT}/{owt_id}/confirm", headers=ident.headers)


async def cancel(
    client: httpx.AsyncClient, ident: Identity, owt_id: str, json: Any = None
) -> httpx.Response:
    return await client.post(f"{OWT}/{owt_id}/cancel", headers=ident.headers, json=json)


def outcome(match: str, **result: str) -> list[dict[str, Any]]:
    return [{"category": "UK_CONFIRMATION_OF_PAYEE", "categoryResult": {"match": match, **result}}]


async def test_a_gbp_wire_transfer_waits_for_its_payer_to_confirm_the_payee(
    client, programme, admin_headers
):
    p = await programme()
    ident, acc = await gbp_customer(client, p)
    owt = await made(client, ident, gbp(p, acc))
    assert owt["state"] == "PENDING_CONFIRMATION"
    assert owt["type"] == "FASTER_PAYMENTS"
    assert owt["validationOutcomes"] == outcome("EXACT_MATCH", accountName="Ada Lovelace")
    assert "challengeExemptionReason" not in owt
    # Its money is held while it waits, as while it waits for SCA.
    assert await balances(client, ident, acc) == (FUNDS - AMOUNT - FEE, FUNDS)
    # The 3.29.1 interface has no such state: it does not show the wire transfer at all.
    assert (await read(client, ident, owt["id"], "/multi")).status_code == 404
    listed = await client.get("/multi/outgoing_wire_transfers", headers=ident.headers)
    assert listed.json()["count"] == 0
    # The line does, in its get and its list (and its state filter).
    assert (await read(client, ident, owt["id"])).json() == owt
    r = await client.get(OWT, headers=ident.headers, params={"state": "PENDING_CONFIRMATION"})
    assert [t["id"] for t in r.json()["transfer"]] == [owt["id"]]
    # The deprecated per-resource challenge has nothing to confirm yet.
    r = await client.post(f"{OWT}/{owt['id']}/challenges/otp/SMS", headers=ident.headers)
    assert (r.status_code, r.json()) == (409, {"errorCode": "STATE_INVALID"})

    r = await confirm(client, ident, owt["id"])
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "PENDING_CHALLENGE"
    assert r.json()["validationOutcomes"] == owt["validationOutcomes"]
    # Now a state 3.29.1 knows: both interfaces show it, each with its own fields.
    old = (await read(client, ident, owt["id"], "/multi")).json()
    assert old["state"] == "PENDING_CHALLENGE"
    assert "validationOutcomes" not in old
    otp = f"{OWT}/{owt['id']}/challenges/otp/SMS"
    assert (await client.post(otp, headers=ident.headers)).status_code == 204
    r = await client.post(f"{otp}/verify", headers=ident.headers, json={"verificationCode": CODE})
    assert r.status_code == 204, r.text
    assert (await read(client, ident, owt["id"])).json()["state"] == "SUBMITTED"
    await advance(client, p, 1)
    await advance(client, p, 2)
    assert (await read(client, ident, owt["id"])).json()["state"] == "COMPLETED"
    assert await balances(client, ident, acc) == (FUNDS - AMOUNT - FEE,) * 2
    # A second confirm finds nothing to confirm.
    r = await confirm(client, ident, owt["id"])
    assert (r.status_code, r.json()) == (409, {"errorCode": "INVALID_STATE"})
    await ledger_ok(client, admin_headers, p)


@pytest.mark.parametrize(
    ("number", "expected"),
    [
        ("12349991", outcome("CLOSE_MATCH", reasonCode="MBAM", accountName="Ada Lovelace Ltd")),
        ("12349992", outcome("NO_MATCH", reasonCode="ANNM")),
        ("12349993", outcome("NO_MATCH", reasonCode="AC01")),
        ("12349994", outcome("EXACT_MATCH", accountName="Ada Lovelace")),
    ],
)
async def test_the_sandbox_answers_by_the_account_numbers_last_digits(
    client, programme, number, expected
):
    p = await programme()
    ident, acc = await gbp_customer(client, p)
    owt = await made(client, ident, gbp(p, acc, number))
    assert (owt["state"], owt["validationOutcomes"]) == ("PENDING_CONFIRMATION", expected)
    # Whatever the answer, the payer decides: a no-match may still be confirmed.
    r = await confirm(client, ident, owt["id"])
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "PENDING_CHALLENGE"


async def test_what_is_not_checked(client, programme):
    """SEPA (no UK check) and a create through 3.29.1 (a live programme's, which has no
    Confirmation of Payee provider in this build: tests/payments/test_confirmation_of_payee.py)."""
    p = await programme()
    ident, acc = await customer(client, p, funds=FUNDS)
    sepa = await made(client, ident, body(p, acc))
    assert sepa["state"] == "PENDING_CHALLENGE"
    assert "validationOutcomes" not in sepa
    gident, gacc = await gbp_customer(client, p)
    r = await client.post(
        "/multi/outgoing_wire_transfers", headers=gident.headers, json=gbp(p, gacc)
    )
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "PENDING_CHALLENGE"
    assert "validationOutcomes" not in (await read(client, gident, r.json()["id"])).json()


async def test_confirmed_without_sca_it_is_submitted_with_its_exemption(
    client, programme, admin_headers
):
    p = await programme()
    ident, acc = await gbp_customer(client, p)
    # Within the low-value exemption (D13): decided at confirm, not at create.
    small = await made(client, ident, gbp(p, acc, transferAmount={"currency": "GBP", "amount": 20}))
    assert small["state"] == "PENDING_CONFIRMATION"
    r = await confirm(client, ident, small["id"])
    assert r.status_code == 200, r.text
    assert (r.json()["state"], r.json()["challengeExemptionReason"]) == ("SUBMITTED", "LOW_VALUE")
    assert (
        "challengeExemptionReason" not in (await read(client, ident, small["id"], "/multi")).json()
    )
    # SCA off for the programme's wire transfers: submitted with no exemption named.
    await settings(client, admin_headers, p, owtScaRequired=False)
    owt = await made(client, ident, gbp(p, acc))
    assert owt["state"] == "PENDING_CONFIRMATION"
    r = await confirm(client, ident, owt["id"])
    assert r.json()["state"] == "SUBMITTED"
    assert "challengeExemptionReason" not in r.json()
    await ledger_ok(client, admin_headers, p)


async def test_a_cancel_gives_the_money_back(client, programme, admin_headers):
    p = await programme()
    ident, acc = await gbp_customer(client, p)
    waiting = await made(client, ident, gbp(p, acc))
    r = await cancel(client, ident, waiting["id"], {"cancellationReason": "wrong payee"})
    assert r.status_code == 200, r.text
    assert (r.json()["state"], r.json()["cancellationReason"]) == ("CANCELLED", "wrong payee")
    assert await balances(client, ident, acc) == (FUNDS, FUNDS)
    assert (await read(client, ident, waiting["id"])).json()["state"] == "CANCELLED"
    # CANCELLED is no state of 3.29.1, and final: it never shows there.
    assert (await read(client, ident, waiting["id"], "/multi")).status_code == 404
    # Cancelled while awaiting its challenge, with the challenge started and no body: the code
    # then confirms nothing.
    owt = await made(client, ident, gbp(p, acc))
    assert (await confirm(client, ident, owt["id"])).json()["state"] == "PENDING_CHALLENGE"
    otp = f"{OWT}/{owt['id']}/challenges/otp/SMS"
    assert (await client.post(otp, headers=ident.headers)).status_code == 204
    r = await cancel(client, ident, owt["id"])
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "CANCELLED"
    assert "cancellationReason" not in r.json()
    r = await client.post(f"{otp}/verify", headers=ident.headers, json={"verificationCode": CODE})
    assert (r.status_code, r.json()) == (409, {"errorCode": "STATE_INVALID"})
    assert await balances(client, ident, acc) == (FUNDS, FUNDS)
    # Gone already: nothing left to cancel.
    r = await cancel(client, ident, owt["id"])
    assert (r.status_code, r.json()) == (409, {"errorCode": "INVALID_STATE"})
    # Nor once submitted.
    small = await made(client, ident, gbp(p, acc, transferAmount={"currency": "GBP", "amount": 20}))
    assert (await confirm(client, ident, small["id"])).json()["state"] == "SUBMITTED"
    r = await cancel(client, ident, small["id"])
    assert (r.status_code, r.json()) == (409, {"errorCode": "INVALID_STATE"})
    await ledger_ok(client, admin_headers, p)


async def test_a_bad_cancellation_reason_is_400_and_cancels_nothing(client, programme):
    p = await programme()
    ident, acc = await gbp_customer(client, p)
    owt = await made(client, ident, gbp(p, acc))
    for reason in ("x" * 51, "no!", "dot.", 7):
        r = await cancel(client, ident, owt["id"], {"cancellationReason": reason})
        assert r.status_code == 400, (reason, r.text)
        assert r.json()["syntaxErrors"]["invalidFields"][0]["fieldName"] == "cancellationReason"
    r = await client.post(
        f"{OWT}/{owt['id']}/cancel",
        headers={**ident.headers, "content-type": "application/json"},
        content=b"{",
    )
    assert r.status_code == 400
    assert (await read(client, ident, owt["id"])).json()["state"] == "PENDING_CONFIRMATION"
    assert await balances(client, ident, acc) == (FUNDS - AMOUNT - FEE, FUNDS)


async def test_unconfirmed_it_fails_after_five_minutes(client, programme, admin_headers):
    p = await programme()
    ident, acc = await gbp_customer(client, p)
    owt = await made(client, ident, gbp(p, acc))
    await advance(client, p, 299)
    assert (await read(client, ident, owt["id"])).json()["state"] == "PENDING_CONFIRMATION"
    await advance(client, p, 1)
    assert (await read(client, ident, owt["id"])).json()["state"] == "FAILED"
    assert await balances(client, ident, acc) == (FUNDS, FUNDS)
    r = await confirm(client, ident, owt["id"])
    assert (r.status_code, r.json()) == (409, {"errorCode": "INVALID_STATE"})
    # Failed is a state 3.29.1 knows: it shows there now.
    assert (await read(client, ident, owt["id"], "/multi")).json()["state"] == "FAILED"
    await ledger_ok(client, admin_headers, p)


async def test_the_events_of_confirmation_and_cancel(client, programme, admin_headers):
    with receiving() as receiver:
        p = await programme()
        await settings(client, admin_headers, p, webhookUrl=receiver.url)
        ident, acc = await gbp_customer(client, p)
        owt = await made(client, ident, gbp(p, acc, "12349991"))
        await cancel(client, ident, owt["id"], {"cancellationReason": "not them"})
        sent = [
            e
            for e in await events(client, admin_headers, p, "outgoing_wire_transfers")
            if e["transfer"]["id"]["id"] == owt["id"]
        ]
    by_type = {e["eventType"]: e["transfer"] for e in sent}
    assert set(by_type) == {"PENDING_CONFIRMATION", "CANCELLED"}
    expected = outcome("CLOSE_MATCH", reasonCode="MBAM", accountName="Ada Lovelace Ltd")
    assert by_type["PENDING_CONFIRMATION"]["validationOutcomes"] == expected
    assert by_type["PENDING_CONFIRMATION"]["state"] == "PENDING_CONFIRMATION"
    assert "cancellationReason" not in by_type["PENDING_CONFIRMATION"]
    assert by_type["CANCELLED"]["cancellationReason"] == "not them"
    assert by_type["CANCELLED"]["state"] == "CANCELLED"


async def test_confirm_and_cancel_need_step_up_where_the_programme_asks_for_it(
    client, programme, admin_headers
):
    p = await programme()
    ident, acc = await gbp_customer(client, p)
    owt = await made(client, ident, gbp(p, acc))
    await settings(client, admin_headers, p, stepUpRequired=True)
    for r in (await confirm(client, ident, owt["id"]), await cancel(client, ident, owt["id"])):
        assert r.status_code == 403
        assert r.json()["errorCode"] == "STEP_UP_REQUIRED"
    assert (await read(client, ident, owt["id"])).status_code == 403
    await settings(client, admin_headers, p, stepUpRequired=False)
    assert (await read(client, ident, owt["id"])).json()["state"] == "PENDING_CONFIRMATION"


async def test_confirm_and_cancel_refuse_every_caller_but_the_owner(client, programme):
    p, other = await programme(), await programme()
    ident, acc = await gbp_customer(client, p)
    owt = await made(client, ident, gbp(p, acc))
    stranger = await sign_up(client, p, base=LINE)
    for op in ("confirm", "cancel"):
        path = f"{OWT}/{owt['id']}/{op}"
        no_key = {"Authorization": ident.headers["Authorization"]}
        r = await client.post(path, headers=no_key)
        assert r.status_code == 400
        assert r.json()["syntaxErrors"]["invalidFields"][0]["fieldName"] == "api-key"
        r = await client.post(path, headers={**ident.headers, "api-key": "mb_sbx_nope"})
        assert r.status_code == 401
        assert (
            await client.post(path, headers={**ident.headers, "api-key": other.api_key})
        ).status_code == 403
        assert (await client.post(path, headers=p.headers)).status_code == 401
        assert (await client.post(path, headers=stranger.headers)).status_code == 404
        assert (await client.post(f"{OWT}/99999/{op}", headers=ident.headers)).status_code == 404
        assert (await client.post(f"{OWT}/abc/{op}", headers=ident.headers)).status_code == 400
    assert (await read(client, ident, owt["id"])).json()["state"] == "PENDING_CONFIRMATION"
    assert (await read(client, stranger, owt["id"])).status_code == 404


async def test_the_operations_are_the_lines_alone(client, programme):
    """On 3.29.1 and 3.1.0 confirm and cancel do not exist (D35); the line describes them."""
    p = await programme()
    ident, acc = await gbp_customer(client, p)
    owt = await made(client, ident, gbp(p, acc))
    for base in ("/multi", "/3.29.1/multi", "/3.1.0/multi"):
        for op in ("confirm", "cancel"):
            r = await client.post(
                f"{base}/outgoing_wire_transfers/{owt['id']}/{op}", headers=ident.headers
            )
            assert r.status_code == 404, (base, op, r.text)
    line = (await client.get(f"{LINE}/openapi.json")).json()
    assert line["paths"]["/outgoing_wire_transfers/{id}/confirm"]["post"]["operationId"] == (
        "outgoingWireTransferConfirm"
    )
    assert line["paths"]["/outgoing_wire_transfers/{id}/cancel"]["post"]["operationId"] == (
        "outgoingWireTransferSingleCancel"
    )
    states = line["components"]["schemas"]["OwtRead3_63"]["properties"]["state"]["enum"]
    assert {"PENDING_CONFIRMATION", "CANCELLED", "INVALID"} <= set(states)
    latest = (await client.get("/multi/openapi.json")).json()
    assert "/outgoing_wire_transfers/{id}/confirm" not in latest["paths"]


async def test_a_refused_create_is_shown_invalid_on_the_line(client, programme):
    """D35: the line shows `INVALID` wire transfers (3.29.1 hides them, D12a)."""
    p = await programme()
    ident, acc = await customer(client, p, funds=10, currency="GBP")
    r = await client.post(OWT, headers=ident.headers, json=gbp(p, acc))
    assert (r.status_code, r.json()) == (409, {"errorCode": "FUNDS_INSUFFICIENT"})
    listed = (await client.get(OWT, headers=ident.headers)).json()
    assert [t["state"] for t in listed["transfer"]] == ["INVALID"]
    assert "validationOutcomes" not in listed["transfer"][0]
    assert (await client.get("/multi/outgoing_wire_transfers", headers=ident.headers)).json()[
        "count"
    ] == 0


async def test_push_challenge_after_confirm(client, programme):
    p = await programme()
    ident, acc = await gbp_customer(client, p)
    await enrol_push(client, ident.headers, "AUTHY")
    owt = await made(client, ident, gbp(p, acc))
    push = f"{OWT}/{owt['id']}/challenges/push/AUTHY"
    r = await client.post(push, headers=ident.headers)
    assert (r.status_code, r.json()) == (409, {"errorCode": "STATE_INVALID"})
    assert (await confirm(client, ident, owt["id"])).status_code == 200
    assert (await client.post(push, headers=ident.headers)).status_code == 204


async def test_the_operator_sees_the_check_and_the_reason(client, programme, app):
    p = await programme()
    ident, acc = await gbp_customer(client, p)
    owt = await made(client, ident, gbp(p, acc, "12349992"))
    assert (
        await cancel(client, ident, owt["id"], {"cancellationReason": "no match"})
    ).status_code == 200
    operator = await signed_in_client(app)
    try:
        base = f"/portal/programmes/{p.id}/payments"
        words = text(await page(operator, f"{base}/{owt['id']}"))
        assert "Confirmation of Payee NO_MATCH (ANNM)" in words
        assert "Cancelled because no match" in words
        assert "Hold released (CANCELLED)" in words
        listed = await page(operator, f"{base}?state=CANCELLED")
        assert owt["id"] in listed
        assert 'value="PENDING_CONFIRMATION"' in listed
    finally:
        await operator.aclose()
