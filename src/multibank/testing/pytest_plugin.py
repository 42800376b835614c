"""A real multibank inside a client project's pytest run.

Installed with the package and loaded by pytest itself (the `pytest11` entry point in
pyproject.toml), it gives a client's tests three fixtures:

- `multibank_server` (one per test session): `multibank serve` in a process of its own, on a free
  loopback port and a temporary SQLite file, ready (`/readyz`) before the first test; its base
  URL, the `default` programme's API key and profile ids as `serve` prints them, and the operator
  API's admin token it was started with.
- `multibank_programme` (one per test): a fresh sandbox programme made through the operator API,
  so no test sees another's customers or money.
- `multibank_customer` (one per test): a corporate of that programme, signed up, its e-mail
  verified, its password created, its KYB approved by the simulator and logged in; its
  `headers` authorise the client API's calls.

For scheduled payments (the 3.63 line's `scheduledTimestamp`, on the programme's clock), the
customer opens accounts (`account(currency, funds=...)`: with its IBAN, and money deposited by
the simulator) and schedules a transfer between two of them (`schedule_transfer(amount,
in_seconds=... | at_ms=...)`, the transfer's JSON as `POST /3.63.4/multi/transfers` answers it,
`SCHEDULED`); the programme runs it when its time comes (`advance(seconds)`, the simulator's
clock, which executes what is then due) or at once (`scheduled_execute("transfers", id)`).
Moving the clock more than 5 minutes on ends the customer's session: `login()` answers the same
customer logged in again. `trusted_beneficiary(iban=..., name=...)` makes an `ACTIVE` trusted
beneficiary of the customer (SEPA bank details, its batch confirmed by the sandbox's SMS code),
whom the line's wire transfers pay without SCA.

Everything goes through the server's public HTTP interface with plain httpx: the server under
test runs no code path of its own for tests. Only pytest imports this module (the server never
does), so pytest stays a dependency of the client's tests, not of multibank.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

API = "/multi"
LINE = "/3.63.4/multi"  # the 3.63 line: scheduled payments are its alone
SIMULATOR = "/simulate/api"
OPERATOR_API = "/portal/api"
SANDBOX_CODE = "123456"  # every one-time code of a sandbox programme
START_TIMEOUT_SECONDS = 120.0


@dataclass(frozen=True)
class MultibankServer:
    """A running `multibank serve`, with what it printed when it started."""

    base_url: str
    api_key: str  # the `default` programme's
    profiles: dict[str, str]  # the `default` programme's profile ids, by kind
    programme_id: str  # the `default` programme's
    admin_token: str  # the operator API's (`Authorization: Bearer ...`)
    database_url: str
    log_path: Path  # everything the server wrote, for a failing test to show

    @property
    def headers(self) -> dict[str, str]:
        """The `api-key` header of the `default` programme."""
        return {"api-key": self.api_key}

    @property
    def admin_headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.admin_token}"}


@dataclass(frozen=True)
class MultibankProgramme:
    """A sandbox programme made for one test."""

    base_url: str
    name: str
    programme_id: str
    api_key: str
    profiles: dict[str, str]

    @property
    def headers(self) -> dict[str, str]:
        return {"api-key": self.api_key}

    @property
    def simulator_headers(self) -> dict[str, str]:
        """The simulator's header (`/simulate/api/...`): the programme's key."""
        return {"programme-key": self.api_key}

    def advance(self, seconds: int) -> int:
        """Moves the programme's clock `seconds` (at least 1) on, as the simulator does: what is
        then due (a scheduled payment whose time has come, an expiry) happens. Answers the
        programme's time after it, in epoch ms."""
        body = {"seconds": seconds}
        answer = self._simulate("clock advance (simulator)", "/clock/advance", body)
        now: int = answer["now"]
        return now

    def now_ms(self) -> int:
        """The programme's time (epoch ms), read as the simulator answers it: the clock moves one
        second on (the least it moves)."""
        return self.advance(1)

    def scheduled_execute(self, kind: str, payment_id: str) -> dict[str, Any]:
        """Runs a `SCHEDULED` payment now, whatever its time (`kind`: transfers, sends or
        outgoing_wire_transfers): `{"state": "SUCCESS"}`, or `ERROR` with its `errorCode`."""
        path = f"/{kind}/{payment_id}/scheduled_execute"
        ran: dict[str, Any] = self._simulate("scheduled execution (simulator)", path)
        return ran

    def _simulate(self, what: str, path: str, body: Any = None) -> Any:
        import httpx

        with httpx.Client(base_url=self.base_url, timeout=30) as client:
            return _call(client, what, "POST", f"{SIMULATOR}{path}", self.simulator_headers, body)


@dataclass(frozen=True)
class MultibankCustomer:
    """A verified corporate of a `MultibankProgramme`, logged in."""

    programme: MultibankProgramme
    identity_id: str
    root_user_id: str
    email: str
    password: str
    token: str
    headers: dict[str, str] = field(repr=False)  # `api-key` and `authorization: Bearer ...`

    def login(self) -> MultibankCustomer:
        """The customer logged in again (a new token and headers): a session ends after 5
        minutes of the programme's clock without a call, as `programme.advance` can make."""
        import httpx

        key = self.programme.headers
        body = {"email": self.email, "password": {"value": self.password}}
        with httpx.Client(base_url=self.programme.base_url, timeout=30) as client:
            login = _call(client, "login", "POST", f"{API}/login_with_password", key, body)
        token = login["token"]
        return replace(self, token=token, headers={**key, "authorization": f"Bearer {token}"})

    def account(self, currency: str = "EUR", funds: int = 0) -> str:
        """A new managed account of the customer with its IBAN; with `funds` (minor units), that
        much deposited by the simulator. Answers its id."""
        import httpx

        sim = self.programme.simulator_headers
        body = {
            "profileId": self.programme.profiles["corporateManagedAccount"],
            "friendlyName": "Test account",
            "currency": currency,
        }
        with httpx.Client(base_url=self.programme.base_url, timeout=30) as client:
            made = _call(client, "account", "POST", f"{API}/managed_accounts", self.headers, body)
            account = str(made["id"])
            url = f"{API}/managed_accounts/{account}/iban"
            iban = _call(client, "IBAN request", "POST", url, self.headers)
            if iban["state"] != "ALLOCATED":
                url = f"{SIMULATOR}/managed_accounts/{account}/iban/allocate"
                answer = client.post(url, headers=sim)
                if answer.status_code not in (204, 409):  # 409: allocated meanwhile
                    raise AssertionError(f"IBAN allocation: HTTP {answer.status_code}")
            if funds:
                url = f"{SIMULATOR}/accounts/{account}/deposit"
                money = {"depositAmount": {"currency": currency, "amount": funds}}
                _call(client, "deposit (simulator)", "POST", url, sim, money)
        return account

    def schedule_transfer(
        self,
        amount: int,
        *,
        in_seconds: int | None = None,
        at_ms: int | None = None,
        currency: str = "EUR",
        source: str | None = None,
        destination: str | None = None,
    ) -> dict[str, Any]:
        """A transfer of `amount` (minor units) between two of the customer's accounts, made
        through the 3.63 line to go at `at_ms` (epoch ms of the programme's clock) or
        `in_seconds` from now (`programme.now_ms()`; 60 when neither is given): the answer's
        JSON, `SCHEDULED`, nothing moved yet. Without `source`, a new account holding `amount`
        pays; without `destination`, a new empty account is paid."""
        import httpx

        if at_ms is not None and in_seconds is not None:
            raise ValueError("give in_seconds or at_ms, not both")
        source = source or self.account(currency, funds=amount)
        destination = destination or self.account(currency)
        if at_ms is None:  # read last: the accounts' calls take their time
            at_ms = self.programme.now_ms() + 1000 * (60 if in_seconds is None else in_seconds)
        body = {
            "profileId": self.programme.profiles["transfers"],
            "source": {"type": "managed_accounts", "id": source},
            "destination": {"type": "managed_accounts", "id": destination},
            "destinationAmount": {"currency": currency, "amount": amount},
            "scheduledTimestamp": str(at_ms),
        }
        with httpx.Client(base_url=self.programme.base_url, timeout=30) as client:
            made: dict[str, Any] = _call(
                client, "scheduled transfer", "POST", f"{LINE}/transfers", self.headers, body
            )
        return made

    def trusted_beneficiary(
        self,
        iban: str = "DE89370400440532013000",
        name: str = "Ada Lovelace",
        bic: str = "COBADEFFXXX",
    ) -> dict[str, Any]:
        """A trusted beneficiary of the customer (the 3.63 line's `/beneficiaries`): SEPA bank
        details, its batch confirmed by the customer's SMS code (the factor is enrolled first if
        it is not; the sandbox's code is 123456). Answers the beneficiary's JSON, `ACTIVE`: a
        wire transfer to `{"beneficiaryId": ...}` then needs no SCA."""
        import httpx

        item = {
            "trustLevel": "TRUSTED",
            "beneficiaryInformation": {"fullName": name},
            "beneficiaryDetails": {"bankAccountDetails": {"iban": iban, "bankIdentifierCode": bic}},
        }
        code = {"verificationCode": SANDBOX_CODE}
        with httpx.Client(base_url=self.programme.base_url, timeout=30) as client:
            otp = f"{API}/authentication_factors/otp/SMS"
            if client.post(otp, headers=self.headers).status_code == 204:  # not yet enrolled
                _call(client, "SMS factor", "POST", f"{otp}/verify", self.headers, code)
            made = _call(
                client,
                "beneficiary batch",
                "POST",
                f"{LINE}/beneficiaries",
                self.headers,
                {"beneficiaries": [item]},
            )
            batch = made["operationBatchId"]["batchId"]
            url = f"{LINE}/beneficiaries/batch/{batch}/challenges/otp/SMS"
            _call(client, "beneficiary challenge", "POST", url, self.headers)
            _call(client, "beneficiary code", "POST", f"{url}/verify", self.headers, code)
            listed = _call(
                client,
                "beneficiaries",
                "GET",
                f"{LINE}/beneficiaries?batchId={batch}",
                self.headers,
            )
        [beneficiary] = listed["beneficiaries"]
        if beneficiary["state"] != "ACTIVE":
            raise AssertionError(f"beneficiary not ACTIVE: {beneficiary}")
        out: dict[str, Any] = beneficiary
        return out


class MultibankStartError(RuntimeError):
    """`multibank serve` did not become ready; the message carries the end of its output."""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _banner(text: str) -> dict[str, str] | None:
    """The `default` programme's id, API key and profiles from `serve`'s start banner, once its
    last line (`profiles: {...}`) is written; None before."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        words = line.strip()
        if words.startswith("programme 'default'") and " id " in words:
            found["programme_id"] = words.rsplit(" id ", 1)[1].strip()
        elif words.startswith("api-key:"):
            found["api_key"] = words.split(":", 1)[1].strip()
        elif words.startswith("profiles:"):
            found["profiles"] = words.split(":", 1)[1].strip()
            return found
    return None


def _ready(url: str) -> bool:
    import httpx

    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _tail(path: Path, lines: int = 40) -> str:
    text = path.read_text(errors="replace") if path.exists() else ""
    return "\n".join(text.splitlines()[-lines:])


@pytest.fixture(scope="session")
def multibank_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MultibankServer]:
    """`multibank serve` on a free port and a temporary SQLite database, for the whole session."""
    home = tmp_path_factory.mktemp("multibank")
    port = _free_port()
    admin_token = secrets.token_urlsafe(32)
    database_url = f"sqlite+aiosqlite:///{home / 'multibank.db'}"
    env = {
        **os.environ,
        "MULTIBANK_DATABASE_URL": database_url,
        "MULTIBANK_ADMIN_TOKEN": admin_token,
        "MULTIBANK_LOG_LEVEL": os.environ.get("MULTIBANK_LOG_LEVEL", "WARNING"),
    }
    log_path = home / "serve.log"
    command = [sys.executable, "-m", "multibank", "serve", "--port", str(port)]
    # Its output goes to a file, never a pipe nobody reads: a full pipe would stop the server.
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, cwd=home, env=env, stdout=log, stderr=log)
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        banner = None
        while True:
            if banner is None:
                banner = _banner(log_path.read_text(errors="replace"))
            if banner is not None and _ready(f"{base_url}/readyz"):
                break
            if process.poll() is not None:
                raise MultibankStartError(
                    f"`multibank serve` exited with {process.returncode}:\n{_tail(log_path)}"
                )
            if time.monotonic() > deadline:
                raise MultibankStartError(
                    f"`multibank serve` not ready within {START_TIMEOUT_SECONDS:g} s:\n"
                    f"{_tail(log_path)}"
                )
            time.sleep(0.1)
        yield MultibankServer(
            base_url=base_url,
            api_key=banner["api_key"],
            profiles=json.loads(banner["profiles"]),
            programme_id=banner["programme_id"],
            admin_token=admin_token,
            database_url=database_url,
            log_path=log_path,
        )
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _call(
    client: Any, what: str, method: str, path: str, headers: dict[str, str], body: Any = None
) -> Any:
    answer = client.request(method, path, headers=headers, json=body)
    if answer.status_code >= 300:
        raise AssertionError(f"{what}: HTTP {answer.status_code} {answer.text[:500]}")
    return answer.json() if answer.content else None


@pytest.fixture
def multibank_programme(multibank_server: MultibankServer) -> MultibankProgramme:
    """A new sandbox programme (made through the operator API) for this test alone."""
    import httpx

    name = f"test-{secrets.token_hex(6)}"
    with httpx.Client(base_url=multibank_server.base_url, timeout=30) as client:
        made = _call(
            client,
            "programme creation (operator API)",
            "POST",
            f"{OPERATOR_API}/programmes",
            multibank_server.admin_headers,
            {"name": name},
        )
    return MultibankProgramme(
        base_url=multibank_server.base_url,
        name=name,
        programme_id=made["programmeId"],
        api_key=made["apiKey"],
        profiles=made["profiles"],
    )


@pytest.fixture
def multibank_customer(multibank_programme: MultibankProgramme) -> MultibankCustomer:
    """A corporate of this test's programme, e-mail verified, password set, KYB approved by the
    simulator, and logged in."""
    import httpx

    from multibank.identities.samples import corporate_signup

    programme = multibank_programme
    email = f"corporate-{secrets.token_hex(6)}@example.com"
    password = f"Test-1-{secrets.token_hex(6)}"
    key = programme.headers
    with httpx.Client(base_url=programme.base_url, timeout=30) as client:
        body = corporate_signup(programme.profiles["corporate"], email, company="Test Client Ltd")
        created = _call(client, "corporate sign-up", "POST", f"{API}/corporates", key, body)
        identity_id = created["id"]["id"]
        root_user_id = created["rootUser"]["id"]["id"]
        for step, extra in (("send", {}), ("verify", {"verificationCode": SANDBOX_CODE})):
            url = f"{API}/corporates/verification/email/{step}"
            _call(
                client, f"e-mail verification ({step})", "POST", url, key, {"email": email, **extra}
            )
        url = f"{API}/passwords/{root_user_id}/create"
        _call(client, "password", "POST", url, key, {"password": {"value": password}})
        url = f"{SIMULATOR}/corporates/{identity_id}/verify"
        _call(client, "KYB (simulator)", "POST", url, programme.simulator_headers)
        body = {"email": email, "password": {"value": password}}
        login = _call(client, "login", "POST", f"{API}/login_with_password", key, body)
    token = login["token"]
    return MultibankCustomer(
        programme=programme,
        identity_id=identity_id,
        root_user_id=root_user_id,
        email=email,
        password=password,
        token=token,
        headers={**key, "authorization": f"Bearer {token}"},
    )
