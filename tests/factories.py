"""Builders of request bodies and whole journeys, as a client developer would write them."""

from __future__ import annotations

import secrets
from typing import Any

import httpx

from multibank.identities.samples import consumer_signup, corporate_signup
from tests.conftest import Prog

PASSWORD = "Sup3r-secret!"
# What a new programme has (D4, D12): its profiles in the order the summary names them, and the
# default fee of each payment kind in every currency. Written out here, not imported from the
# server, so the tests say what a client sees.
PROFILE_KINDS = (
    "corporate",
    "consumer",
    "corporateManagedAccount",
    "consumerManagedAccount",
    "transfers",
    "sends",
    "outgoingWireTransfers",
    "corporatePrepaidManagedCard",
    "corporateDebitManagedCard",
    "consumerPrepaidManagedCard",
    "consumerDebitManagedCard",
    "linkedAccounts",
)
MOVEMENT_KINDS = ("transfers", "sends", "outgoingWireTransfers")
DEFAULT_MOVEMENT_FEES = {
    "transfers": {"EUR": 0, "GBP": 0, "USD": 0},
    "sends": {"EUR": 0, "GBP": 0, "USD": 0},
    "outgoingWireTransfers": {"EUR": 100, "GBP": 100, "USD": 100},
}
# A new programme's payment settings (D13, D14).
PAYMENT_SETTINGS = {
    "sendsScaRequired": True,
    "owtScaRequired": True,
    "scaChallengeLimit": 5,
    "lowValueExemptionMaxAmount": 3000,
    "lowValueExemptionMaxCount": 5,
    "lowValueExemptionMaxTotal": 10000,
    "owtProcessingDelaySeconds": 2,
    "webhookUrl": None,  # D16: none, no delivery
}
CODE = "123456"


def email() -> str:
    return f"u{secrets.token_hex(6)}@example.com"


def corporate_body(p: Prog, **over: Any) -> dict[str, Any]:
    """The sample corporate sign-up (identities/samples.py), a fresh e-mail, `over` on top."""
    body = corporate_signup(p.profiles["corporate"], email(), tag="acme-tag")
    body.update(over)
    return body


def consumer_body(p: Prog, **over: Any) -> dict[str, Any]:
    """The sample consumer sign-up (identities/samples.py), a fresh e-mail, `over` on top."""
    body = consumer_signup(p.profiles["consumer"], email())
    body.update(over)
    return body


class Identity:
    """A signed-up identity with a logged-in root user."""

    def __init__(self, p: Prog, kind: str, body: dict[str, Any], created: dict[str, Any]) -> None:
        self.p = p
        self.kind = kind  # "corporates" | "consumers"
        self.body = body
        self.created = created
        self.id: str = created["id"]["id"]
        self.root_id: str = created["rootUser"]["id"]["id"]
        self.email: str = body["rootUser"]["email"]
        self.token = ""

    @property
    def headers(self) -> dict[str, str]:
        return {**self.p.headers, "Authorization": f"Bearer {self.token}"}


async def sign_up(
    client: httpx.AsyncClient,
    p: Prog,
    kind: str = "corporates",
    base: str = "/multi",
    verify_email: bool = True,
    **over: Any,
) -> Identity:
    body = corporate_body(p, **over) if kind == "corporates" else consumer_body(p, **over)
    r = await client.post(f"{base}/{kind}", headers=p.headers, json=body)
    assert r.status_code == 200, r.text
    ident = Identity(p, kind, body, r.json())
    if verify_email:
        for step, extra in (("send", {}), ("verify", {"verificationCode": CODE})):
            r = await client.post(
                f"{base}/{kind}/verification/email/{step}",
                headers=p.headers,
                json={"email": ident.email, **extra},
            )
            assert r.status_code == 204, r.text
    r = await client.post(
        f"{base}/passwords/{ident.root_id}/create",
        headers=p.headers,
        json={"password": {"value": PASSWORD}},
    )
    assert r.status_code == 200, r.text
    ident.token = r.json()["token"]
    return ident


async def otp_step_up(
    client: httpx.AsyncClient, headers: dict[str, str], base: str = "/multi"
) -> None:
    """Steps the session up with an SMS one-time code (an SMS factor must be enrolled)."""
    otp = f"{base}/stepup/challenges/otp/SMS"
    assert (await client.post(otp, headers=headers)).status_code == 204
    r = await client.post(f"{otp}/verify", headers=headers, json={"verificationCode": CODE})
    assert r.status_code == 204, r.text


async def invited_user(
    client: httpx.AsyncClient, p: Prog, root: Identity, user_email: str | None = None
) -> tuple[str, str, str]:
    """An authorised user of `root`'s identity, invited and with a password: (id, e-mail, the
    token its invite consumption answered)."""
    user_email = user_email or email()
    r = await client.post(
        "/multi/users",
        headers=root.headers,
        json={"name": "Eve", "surname": "Invited", "email": user_email},
    )
    assert r.status_code == 200, r.text
    user_id: str = r.json()["id"]
    r = await client.post(f"/multi/users/{user_id}/invite", headers=root.headers)
    assert r.status_code == 204, r.text
    r = await client.post(
        f"/multi/users/{user_id}/invite/consume",
        headers=p.headers,
        json={"inviteCode": CODE, "password": {"value": PASSWORD}},
    )
    assert r.status_code == 200, r.text
    return user_id, user_email, str(r.json()["token"])


async def login(
    client: httpx.AsyncClient, p: Prog, email_: str, password: str = PASSWORD, base: str = "/multi"
) -> httpx.Response:
    return await client.post(
        f"{base}/login_with_password",
        headers=p.headers,
        json={"email": email_, "password": {"value": password}},
    )


async def verified(
    client: httpx.AsyncClient, p: Prog, kind: str = "corporates", base: str = "/multi", **over: Any
) -> Identity:
    """A signed-up identity approved through the simulator, logged in."""
    ident = await sign_up(client, p, kind, base, **over)
    r = await client.post(
        f"/simulate/api/{kind}/{ident.id}/verify", headers={"programme-key": p.api_key}
    )
    assert r.status_code == 204, r.text
    return ident


async def open_account(
    client: httpx.AsyncClient,
    ident: Identity,
    currency: str = "EUR",
    base: str = "/multi",
    iban: bool = False,
    **over: Any,
) -> dict[str, Any]:
    """Opens an account (with `iban`, also its IBAN). `deposit` gives it an IBAN when needed."""
    profile = "corporateManagedAccount" if ident.kind == "corporates" else "consumerManagedAccount"
    body = {"profileId": ident.p.profiles[profile], "friendlyName": "Main", "currency": currency}
    body.update(over)
    r = await client.post(f"{base}/managed_accounts", headers=ident.headers, json=body)
    assert r.status_code == 200, r.text
    result: dict[str, Any] = r.json()
    _owners[result["id"]] = (ident, base)
    if iban:
        await upgrade_to_iban(client, ident, result["id"], base)
    return result


# Who opened each account, so `deposit` can give it an IBAN first, as its owner would.
_owners: dict[str, tuple[Identity, str]] = {}


async def upgrade_to_iban(
    client: httpx.AsyncClient, ident: Identity, account_id: str, base: str = "/multi"
) -> dict[str, Any]:
    """Gives an account its IBAN, as the owner and the simulator would: money from outside
    (a simulator deposit) reaches only an account with an allocated IBAN (D11a)."""
    url = f"{base}/managed_accounts/{account_id}/iban"
    r = await client.post(url, headers=ident.headers)
    assert r.status_code == 200, r.text
    if r.json()["state"] == "PENDING_ALLOCATION":
        r = await client.post(
            f"/simulate/api/managed_accounts/{account_id}/iban/allocate",
            headers={"programme-key": ident.p.api_key},
        )
        assert r.status_code == 204, r.text
        r = await client.get(url, headers=ident.headers)
    iban: dict[str, Any] = r.json()
    assert iban["state"] == "ALLOCATED", iban
    return iban


async def deposit(
    client: httpx.AsyncClient, p: Prog, account_id: str, amount: int, currency: str = "EUR"
) -> str:
    await _ensure_iban(client, account_id)
    r = await client.post(
        f"/simulate/api/accounts/{account_id}/deposit",
        headers={"programme-key": p.api_key},
        json={"depositAmount": {"currency": currency, "amount": amount}},
    )
    assert r.status_code == 200, r.text
    code: str = r.json()["code"]
    return code


async def _ensure_iban(client: httpx.AsyncClient, account_id: str) -> None:
    """Money from outside reaches only an account with an allocated IBAN (D11a): an active
    account opened through `open_account` is upgraded first (others get the simulator's code)."""
    if account_id not in _owners:
        return
    ident, base = _owners[account_id]
    url = f"{base}/managed_accounts/{account_id}"
    account = await client.get(url, headers=ident.headers)
    if account.status_code != 200 or account.json()["state"]["state"] != "ACTIVE":
        return
    if (await client.get(f"{url}/iban", headers=ident.headers)).json()["state"] != "ALLOCATED":
        await upgrade_to_iban(client, ident, account_id, base)
