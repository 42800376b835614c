"""`multibank sandbox seed`: a verified corporate and a verified consumer of a sandbox programme,
each with a funded EUR account, its IBAN, an active SMS factor and a logged-in, stepped-up token.

The application runs in this process, on the configured database, and is driven through the same
HTTP calls a client developer makes (sign-up, e-mail verification, password, the simulator's
verification, SMS enrolment, account, IBAN, the simulator's deposit, login): every rule, ledger
posting and webhook event of the API applies, and nothing is written behind its back. Tokens are
signed with the keys kept in the database, so a `multibank serve` on the same database accepts
them.
"""

from __future__ import annotations

import secrets
from typing import Any

import httpx
from pydantic import BaseModel

from multibank.app import build_container, create_app, startup
from multibank.identities.samples import consumer_signup, corporate_signup
from multibank.kernel.codes import SANDBOX_CODE
from multibank.programmes.schemas import ProgrammeDescription
from multibank.settings import Settings

CURRENCY = "EUR"
# Every field of each address filled in: the official demo app's add-card page sends the
# identity's address as the card's billing address, which needs a post code, and shows every
# line (issue 41 §4).
CORPORATE_ADDRESS = {
    "addressLine1": "1 High Street",
    "addressLine2": "Floor 2",
    "city": "London",
    "postCode": "EC1A 1BB",
    "state": "Greater London",
    "country": "GB",
}
CONSUMER_ADDRESS = {
    "addressLine1": "2 Main Street",
    "addressLine2": "Flat 1",
    "city": "Valletta",
    "postCode": "VLT 1000",
    "state": "Malta",
    "country": "MT",
}
DEPOSIT = 100_000  # minor units: 1000.00 EUR
API = "/multi"
SIMULATOR = "/simulate/api"


class SeedError(Exception):
    """Why seeding stopped, in one line."""


class SeededIdentity(BaseModel):
    email: str
    password: str
    identityId: str
    rootUserId: str
    accountId: str
    iban: str
    token: str


class Seeded(BaseModel):
    """What `multibank sandbox seed --json` prints."""

    programme: str
    programmeId: str
    apiKey: str
    corporate: SeededIdentity
    consumer: SeededIdentity


def new_password() -> str:
    """A password the rules accept: upper and lower case, a digit and a special character."""
    return f"Sandbox-1-{secrets.token_hex(5)}"


class SeedClient:
    """The calls of a client developer (API key) and of the simulator (programme key)."""

    def __init__(self, http: httpx.AsyncClient, api_key: str) -> None:
        self.http = http
        self.api_key = api_key

    async def call(
        self,
        what: str,
        method: str,
        path: str,
        *,
        token: str | None = None,
        simulator: bool = False,
        body: dict[str, Any] | None = None,
        accept: tuple[int, ...] = (200, 204),
    ) -> Any:
        headers = {"programme-key" if simulator else "api-key": self.api_key}
        if token is not None:
            headers["authorization"] = f"Bearer {token}"
        r = await self.http.request(method, path, headers=headers, json=body)
        if r.status_code not in accept:
            detail = " ".join(r.text.split())[:300]
            raise SeedError(f"{what} failed: HTTP {r.status_code} {detail}".rstrip())
        return r.json() if r.content else None

    async def identity(
        self, kind: str, body: dict[str, Any], account_profile: str
    ) -> SeededIdentity:
        """Signs up a corporate or consumer (`kind`: corporates | consumers) and makes it ready."""
        email: str = body["rootUser"]["email"]
        password = new_password()
        created = await self.call(f"{kind} sign-up", "POST", f"{API}/{kind}", body=body)
        identity_id: str = created["id"]["id"]
        root_id: str = created["rootUser"]["id"]["id"]
        for step, extra in (("send", {}), ("verify", {"verificationCode": SANDBOX_CODE})):
            await self.call(
                f"e-mail verification ({step})",
                "POST",
                f"{API}/{kind}/verification/email/{step}",
                body={"email": email, **extra},
            )
        setup = await self.call(
            "password",
            "POST",
            f"{API}/passwords/{root_id}/create",
            body={"password": {"value": password}},
        )
        await self.call(
            "verification (simulator)",
            "POST",
            f"{SIMULATOR}/{kind}/{identity_id}/verify",
            simulator=True,
        )
        otp = f"{API}/authentication_factors/otp/SMS"
        await self.call("SMS factor enrolment", "POST", otp, token=setup["token"])
        await self.call(
            "SMS factor verification",
            "POST",
            f"{otp}/verify",
            token=setup["token"],
            body={"verificationCode": SANDBOX_CODE},
        )
        await self.call("logout", "POST", f"{API}/logout", token=setup["token"])
        login = await self.call(
            "login",
            "POST",
            f"{API}/login_with_password",
            body={"email": email, "password": {"value": password}},
        )
        token: str = login["token"]
        # Stepped up, the session may use accounts even where the programme demands step-up.
        challenge = f"{API}/stepup/challenges/otp/SMS"
        await self.call("step-up", "POST", challenge, token=token)
        await self.call(
            "step-up verification",
            "POST",
            f"{challenge}/verify",
            token=token,
            body={"verificationCode": SANDBOX_CODE},
        )
        account = await self.call(
            "account",
            "POST",
            f"{API}/managed_accounts",
            token=token,
            body={"profileId": account_profile, "friendlyName": "Sandbox", "currency": CURRENCY},
        )
        account_id: str = account["id"]
        iban = await self._iban(account_id, token)
        await self.call(
            "deposit (simulator)",
            "POST",
            f"{SIMULATOR}/accounts/{account_id}/deposit",
            simulator=True,
            body={"depositAmount": {"currency": CURRENCY, "amount": DEPOSIT}},
        )
        return SeededIdentity(
            email=email,
            password=password,
            identityId=identity_id,
            rootUserId=root_id,
            accountId=account_id,
            iban=iban,
            token=token,
        )

    async def _iban(self, account_id: str, token: str) -> str:
        """Asks for the account's IBAN and has the simulator allocate it now, not after the
        programme's delay (a 409 there: it was allocated meanwhile)."""
        url = f"{API}/managed_accounts/{account_id}/iban"
        answer = await self.call("IBAN request", "POST", url, token=token)
        if answer["state"] != "ALLOCATED":
            await self.call(
                "IBAN allocation (simulator)",
                "POST",
                f"{SIMULATOR}/managed_accounts/{account_id}/iban/allocate",
                simulator=True,
                accept=(204, 409),
            )
            answer = await self.call("IBAN", "GET", url, token=token)
        if answer["state"] != "ALLOCATED":
            raise SeedError(f"the IBAN of account {account_id} is {answer['state']}")
        for entry in answer["bankAccountDetails"]:
            iban = entry.get("details", {}).get("iban")
            if iban:
                return str(iban)
        raise SeedError(f"account {account_id} has no IBAN in its bank details")


async def seed(
    settings: Settings, name: str, programme: ProgrammeDescription
) -> tuple[Seeded, str | None]:
    """Seeds the sandbox programme `name` (described by `programme`, which must be a sandbox
    one). Also answers the operator API admin token when it was generated just now (the
    database had none: `multibank serve` will not show it again)."""
    if not programme.apiKey:
        raise SeedError("it has no API key to use: create one with the operator API")
    # One request at a time, answered before the command ends: no background loops (sandbox
    # messages are never sent; webhook events wait for whichever process delivers them).
    quiet = settings.model_copy(
        update={
            "outbox_poll_seconds": 0,
            "payments_poll_seconds": 0,
            "webhooks_poll_seconds": 0,
            "housekeeping_interval_seconds": 0,
        }
    )
    container = build_container(quiet)
    admin_token_created = await startup(container)
    application = create_app(container=container)
    profiles = programme.profiles
    async with application.router.lifespan_context(application):
        # An unexpected error is a 500 like any client's, said in one line (SeedError).
        transport = httpx.ASGITransport(
            app=application, raise_app_exceptions=False, client=("127.0.0.1", 0)
        )
        async with httpx.AsyncClient(transport=transport, base_url="http://multibank") as http:
            client = SeedClient(http, programme.apiKey)
            tag = secrets.token_hex(4)
            corporate_body = corporate_signup(
                profiles.corporate,
                f"corporate-{tag}@example.com",
                tag="sandbox-seed",
                company="Sandbox Seed Ltd",
                currency=CURRENCY,
            )
            corporate_body["company"]["businessAddress"] = dict(CORPORATE_ADDRESS)
            corporate = await client.identity(
                "corporates", corporate_body, profiles.corporateManagedAccount
            )
            consumer_body = consumer_signup(
                profiles.consumer,
                f"consumer-{tag}@example.com",
                tag="sandbox-seed",
                currency=CURRENCY,
            )
            consumer_body["rootUser"]["address"] = dict(CONSUMER_ADDRESS)
            consumer = await client.identity(
                "consumers", consumer_body, profiles.consumerManagedAccount
            )
    seeded = Seeded(
        programme=name,
        programmeId=programme.programmeId,
        apiKey=programme.apiKey,
        corporate=corporate,
        consumer=consumer,
    )
    return seeded, container.admin_token if admin_token_created else None
