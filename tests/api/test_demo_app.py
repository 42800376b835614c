"""The official demo web app's call sequences, with the assertions the app itself makes.

The demo app (the TypeScript client of the reference's sample UI) talks to `/multi` with the
`api-key` header and the login token. Each test below is one of its screens' journeys, written
from the operation list of contract.md section 3 and issue 9: what it sends, and what it reads
from each answer (the fields must be there with the types it uses), so a change that would break
the app breaks here first.
"""

from __future__ import annotations

import csv
import io
from typing import Any

import httpx
import pytest

from tests.conftest import Prog
from tests.factories import CODE, PASSWORD, consumer_body, corporate_body

SIM = "/simulate/api"
STEP_UP_BODY = {"errorCode": "STEP_UP_REQUIRED", "message": "STEP_UP_REQUIRED"}


def digits(value: Any) -> bool:
    return isinstance(value, str) and value.isdigit()


class App:
    """What the demo app keeps between screens: the programme's key and the user's token."""

    def __init__(self, client: httpx.AsyncClient, p: Prog, base: str = "/multi") -> None:
        self.client, self.p, self.base, self.token = client, p, base, ""

    @property
    def headers(self) -> dict[str, str]:
        h = dict(self.p.headers)
        if self.token:
            h["Authorization"] = f"Bearer {self.token}"
        return h

    async def call(self, method: str, path: str, status: int = 200, **kw: Any) -> httpx.Response:
        r = await self.client.request(method, self.base + path, headers=self.headers, **kw)
        assert r.status_code == status, (method, path, r.status_code, r.text)
        return r

    async def sim(self, path: str, body: Any = None, status: int = 200) -> httpx.Response:
        r = await self.client.post(SIM + path, headers={"programme-key": self.p.api_key}, json=body)
        assert r.status_code == status, (path, r.text)
        return r


async def register(app: App, kind: str) -> dict[str, Any]:
    """Registration, e-mail verification, password and login screens."""
    body = corporate_body(app.p) if kind == "corporates" else consumer_body(app.p)
    created = (await app.call("POST", f"/{kind}", json=body)).json()
    assert digits(created["id"]["id"]) and created["id"]["type"] == kind[:-1].upper()
    root = created["rootUser"]
    assert digits(root["id"]["id"]) and root["emailVerified"] is False
    email = body["rootUser"]["email"]
    await app.call("POST", f"/{kind}/verification/email/send", 204, json={"email": email})
    await app.call(
        "POST",
        f"/{kind}/verification/email/verify",
        204,
        json={"email": email, "verificationCode": CODE},
    )
    r = await app.call(
        "POST", f"/passwords/{root['id']['id']}/create", json={"password": {"value": PASSWORD}}
    )
    assert isinstance(r.json()["token"], str) and r.json()["token"]
    r = await app.call(
        "POST", "/login_with_password", json={"email": email, "password": {"value": PASSWORD}}
    )
    login = r.json()
    assert isinstance(login["token"], str)
    assert login["identity"] == {"type": kind[:-1].upper(), "id": created["id"]["id"]}
    assert login["credentials"]["type"] == "ROOT"
    assert login["credentials"]["id"] == root["id"]["id"]
    if app.base != "/3.1.0/multi":
        assert login["tokenType"] == "AUTH"
    app.token = login["token"]
    me = (await app.call("GET", f"/{kind}")).json()
    assert me["rootUser"]["email"] == email and me["rootUser"]["emailVerified"] is True
    return created


async def enrol_sms(app: App) -> None:
    """The security screen: right after e-mail verification the app reads the factors; with
    none the answer is `{}` and the app offers SMS enrolment (D11: `[]` crashed it)."""
    r = await app.call("GET", "/authentication_factors")
    assert r.json() == {}
    await app.call("POST", "/authentication_factors/otp/SMS", 204)
    await app.call(
        "POST", "/authentication_factors/otp/SMS/verify", 204, json={"verificationCode": CODE}
    )
    factors = (await app.call("GET", "/authentication_factors")).json()["factors"]
    assert factors[0]["status"] == "ACTIVE"
    assert factors[0]["type"] == "OTP" and factors[0]["channel"] == "SMS"


async def verify_identity(app: App, kind: str, created: dict[str, Any]) -> None:
    """KYB/KYC screen: start, read the status; the sandbox approves."""
    dd = "kyb" if kind == "corporates" else "kyc"
    r = await app.call("POST", f"/{kind}/{dd}")
    assert isinstance(r.json()["reference"], str)
    status = "kybStatus" if kind == "corporates" else "fullDueDiligence"
    assert (await app.call("GET", f"/{kind}/{dd}")).json()[status] == "INITIATED"
    await app.sim(f"/{kind}/{created['id']['id']}/verify", status=204)
    assert (await app.call("GET", f"/{kind}/{dd}")).json()[status] == "APPROVED"


async def accounts_and_statement(app: App, kind: str) -> None:
    """Accounts screen: open, upgrade to an IBAN, fund (sandbox), list, read, statement."""
    profile = "corporateManagedAccount" if kind == "corporates" else "consumerManagedAccount"
    account = (
        await app.call(
            "POST",
            "/managed_accounts",
            json={"profileId": app.p.profiles[profile], "friendlyName": "Main", "currency": "EUR"},
        )
    ).json()
    assert digits(account["id"])
    assert account["balances"] == {"availableBalance": 0, "actualBalance": 0}
    aid = account["id"]
    r = await app.sim(
        f"/accounts/{aid}/deposit", {"depositAmount": {"currency": "EUR", "amount": 5}}
    )
    assert r.json() == {"code": "DENIED_ACCOUNT_NOT_UPGRADED_TO_IBAN"}
    iban = (await app.call("POST", f"/managed_accounts/{aid}/iban")).json()
    if iban["state"] == "PENDING_ALLOCATION":
        await app.sim(f"/managed_accounts/{aid}/iban/allocate", status=204)
        iban = (await app.call("GET", f"/managed_accounts/{aid}/iban")).json()
    assert iban["state"] == "ALLOCATED"
    details = iban["bankAccountDetails"][0]
    assert details["details"]["iban"].startswith("IE") and details["paymentReference"]
    r = await app.sim(
        f"/accounts/{aid}/deposit", {"depositAmount": {"currency": "EUR", "amount": 1500}}
    )
    assert r.json() == {"code": "COMPLETED"}
    listed = (await app.call("GET", "/managed_accounts", params={"offset": 0})).json()
    assert listed["count"] == 1 and listed["responseCount"] == 1
    one = listed["accounts"][0]
    assert one["id"] == aid and one["state"]["state"] == "ACTIVE"
    balances = (await app.call("GET", f"/managed_accounts/{aid}")).json()["balances"]
    assert balances == {"availableBalance": 1500, "actualBalance": 1500}
    assert all(isinstance(v, int) for v in balances.values())

    statement = (await app.call("GET", f"/managed_accounts/{aid}/statement")).json()
    entry = statement["entry"][0]  # newest first: the deposit
    assert entry["transactionAmount"] == {"currency": "EUR", "amount": 1500}
    assert entry["balanceAfter"] == {"currency": "EUR", "amount": 1500}
    assert isinstance(entry["processedTimestamp"], int)
    if app.base != "/3.1.0/multi":  # the 3.1.0 entry has no state (contract section 7)
        assert entry["entryState"] == "COMPLETED"
    # The download button: the generated client sends its own Accept, then the chosen one.
    r = await app.client.get(
        f"{app.base}/managed_accounts/{aid}/statement",
        headers=[*app.headers.items(), ("accept", "application/json"), ("accept", "text/csv")],
    )
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(r.text)))
    assert rows and rows[0]["transactionAmount.amount"] == "1500"


async def transfer_and_wire_transfer(app: App, kind: str) -> None:
    """The transfer screen (between the user's own accounts) and the wire transfer screen, with
    the request shapes of the app's client (its beneficiary address is an address object), and
    the list the app reads after each (`transfer` in both envelopes)."""
    profile = "corporateManagedAccount" if kind == "corporates" else "consumerManagedAccount"
    listed = (await app.call("GET", "/managed_accounts")).json()["accounts"]
    source = listed[0]["id"]
    second = (
        await app.call(
            "POST",
            "/managed_accounts",
            json={
                "profileId": app.p.profiles[profile],
                "friendlyName": "Savings",
                "currency": "EUR",
            },
        )
    ).json()["id"]
    made = (
        await app.call(
            "POST",
            "/transfers",
            json={
                "profileId": app.p.profiles["transfers"],
                "source": {"type": "managed_accounts", "id": source},
                "destination": {"type": "managed_accounts", "id": second},
                "destinationAmount": {"currency": "EUR", "amount": 500},
            },
        )
    ).json()
    assert digits(made["id"]) and made["state"] == "COMPLETED"
    assert isinstance(made["creationTimestamp"], int)
    page = (await app.call("GET", "/transfers")).json()
    assert page["count"] == 1 and page["transfer"][0] == made
    assert (await app.call("GET", f"/transfers/{made['id']}")).json() == made

    wire = (
        await app.call(
            "POST",
            "/outgoing_wire_transfers",
            json={
                "profileId": app.p.profiles["outgoingWireTransfers"],
                "sourceInstrument": {"type": "managed_accounts", "id": source},
                "transferAmount": {"currency": "EUR", "amount": 200},
                "description": "Rent",
                "destinationBeneficiary": {
                    "name": "Landlord Ltd",
                    "address": {"addressLine1": "1 Main St", "city": "Dublin", "country": "IE"},
                    "bankAccountDetails": {
                        "iban": "DE89370400440532013000",
                        "bankIdentifierCode": "COBADEFFXXX",
                    },
                },
            },
        )
    ).json()
    # 200 is a low-value payment (D13): submitted without a challenge, and a challenge on it
    # is refused with the code the app shows.
    assert wire["state"] == "SUBMITTED" and wire["type"] == "SEPA"
    otp = f"/outgoing_wire_transfers/{wire['id']}/challenges/otp/SMS"
    r = await app.call("POST", otp, 409)
    assert r.json() == {"errorCode": "SCA_EXEMPTION_APPLIED"}
    # The app's list call puts its filters in a GET body, which the server ignores.
    r = await app.client.request(
        "GET",
        f"{app.base}/outgoing_wire_transfers",
        headers=app.headers,
        json={"profileId": 1, "paging": {"offset": 0, "limit": 10}},
    )
    assert r.status_code == 200, r.text
    shown = r.json()["transfer"][0]
    assert shown["id"] == wire["id"] and shown["state"] == "SUBMITTED"
    assert shown["destination"]["address"]["city"] == "Dublin"
    balances = (await app.call("GET", f"/managed_accounts/{source}")).json()["balances"]
    assert balances == {"availableBalance": 1500 - 500 - 200 - 100, "actualBalance": 1000}


def send_row(entry: dict[str, Any]) -> dict[str, Any]:
    """What the app's statement row of a send shows (its `SendTransaction` component): "To
    <destinationIdentityName>" with the send icon when that field is there, "From
    <sourceIdentityName>" with the receive icon when that one is."""
    fields = entry.get("additionalFields") or {}
    return {
        "out": fields.get("destinationIdentityName") is not None,
        "in": fields.get("sourceIdentityName") is not None,
        "to": fields.get("destinationIdentityName"),
        "from": fields.get("sourceIdentityName"),
    }


async def send_between_apps(sender: App, receiver: App) -> None:
    """A send from one identity's account to another's; each side's statement row names the
    other identity (the app shows no counterparty without it)."""
    source = (await sender.call("GET", "/managed_accounts")).json()["accounts"][0]["id"]
    target = (await receiver.call("GET", "/managed_accounts")).json()["accounts"][0]["id"]
    made = (
        await sender.call(
            "POST",
            "/sends",
            json={
                "profileId": sender.p.profiles["sends"],
                "source": {"type": "managed_accounts", "id": source},
                "destination": {"type": "managed_accounts", "id": target},
                "destinationAmount": {"currency": "EUR", "amount": 300},
            },
        )
    ).json()
    assert made["state"] == "COMPLETED"  # low value (D13): no challenge
    me = (await sender.call("GET", "/corporates")).json()
    them = (await receiver.call("GET", "/consumers")).json()["rootUser"]
    rows = {}
    for app, account in ((sender, source), (receiver, target)):
        statement = (await app.call("GET", f"/managed_accounts/{account}/statement")).json()
        [entry] = [
            e
            for e in statement["entry"]
            if e["transactionId"] == {"type": "SEND", "id": made["id"]}
        ]
        rows[app] = send_row(entry)
    assert rows[sender] == {
        "out": True,
        "in": False,
        "to": f"{them['name']} {them['surname']}",
        "from": None,
    }
    assert rows[receiver] == {
        "out": False,
        "in": True,
        "to": None,
        "from": me["company"]["name"],
    }


async def log_out(app: App, kind: str) -> None:
    await app.call("POST", "/logout", 204)
    await app.call("GET", f"/{kind}", 401)


@pytest.mark.parametrize("kind", ["corporates", "consumers"])
async def test_registration_to_a_funded_account_and_its_statement(client, programme, kind):
    app = App(client, await programme())
    created = await register(app, kind)
    await enrol_sms(app)
    await verify_identity(app, kind, created)
    await accounts_and_statement(app, kind)
    await transfer_and_wire_transfer(app, kind)
    await log_out(app, kind)


async def test_a_send_row_names_the_other_identity(client, programme):
    p = await programme()
    sender, receiver = App(client, p), App(client, p)
    for app, kind in ((sender, "corporates"), (receiver, "consumers")):
        created = await register(app, kind)
        await enrol_sms(app)
        await verify_identity(app, kind, created)
        await accounts_and_statement(app, kind)
    await send_between_apps(sender, receiver)


async def test_a_step_up_programme_sends_the_app_to_its_step_up_page(client, programme):
    app = App(client, await programme(stepUpRequired=True))
    created = await register(app, "corporates")
    await verify_identity(app, "corporates", created)
    # The app routes to its step-up page only when `message` is exactly STEP_UP_REQUIRED.
    for method, path in (
        ("GET", "/managed_accounts"),
        ("POST", "/authentication_factors/push/AUTHY"),
    ):
        r = await app.call(method, path, 403)
        assert r.json() == STEP_UP_BODY
    await enrol_sms(app)
    await app.call("POST", "/stepup/challenges/otp/SMS", 204)
    await app.call(
        "POST", "/stepup/challenges/otp/SMS/verify", 204, json={"verificationCode": CODE}
    )
    assert (await app.call("GET", "/managed_accounts")).json()["count"] == 0
    await accounts_and_statement(app, "corporates")
    r = await app.call("POST", "/authentication_factors/push/AUTHY")
    assert isinstance(r.json()["linkingCode"], str)


@pytest.mark.parametrize("kind", ["corporates", "consumers"])
async def test_the_same_screens_on_3_1_0(client, programme, kind):
    """3.1.0 has no factors or step-up; registration, due diligence and accounts are the same
    calls, and a login answers without tokenType."""
    app = App(client, await programme(), "/3.1.0/multi")
    created = await register(app, kind)
    await app.call("GET", "/authentication_factors", 404)
    await verify_identity(app, kind, created)
    await accounts_and_statement(app, kind)
    await log_out(app, kind)
