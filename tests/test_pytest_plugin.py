"""The pytest plugin as a client project meets it (issue 35 §7): the package is built into a
wheel, installed in a virtual environment of its own with pytest and httpx (no source tree on
the path), and a small project's tests use the fixtures the entry point brings, with nothing but
`pip install multibank` behind them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

CLIENT_TESTS = """
import httpx


def test_the_server_answers_with_the_key_it_printed(multibank_server):
    r = httpx.get(f"{multibank_server.base_url}/readyz")
    assert r.status_code == 200
    r = httpx.get(f"{multibank_server.base_url}/multi/corporates", headers=multibank_server.headers)
    assert r.status_code == 401  # a valid key, but no session yet
    assert set(multibank_server.profiles) >= {"corporate", "consumer", "corporateManagedAccount"}


SEEN = []


def test_the_customer_is_verified_and_logged_in(multibank_customer):
    c = multibank_customer
    r = httpx.get(f"{c.programme.base_url}/multi/corporates", headers=c.headers)
    assert r.status_code == 200, r.text
    assert r.json()["id"]["id"] == c.identity_id
    kyb = httpx.get(f"{c.programme.base_url}/multi/corporates/kyb", headers=c.headers)
    assert kyb.json()["kybStatus"] == "APPROVED", kyb.text
    account = httpx.post(
        f"{c.programme.base_url}/multi/managed_accounts",
        headers=c.headers,
        json={
            "profileId": c.programme.profiles["corporateManagedAccount"],
            "friendlyName": "Client test",
            "currency": "EUR",
        },
    )
    assert account.status_code == 200, account.text
    SEEN.append(c.programme.programme_id)


def test_a_scheduled_transfer_waits_then_goes_on_the_programme_clock(multibank_customer):
    c = multibank_customer
    base = f"{c.programme.base_url}/3.63.4/multi/transfers"
    t = c.schedule_transfer(1_500, in_seconds=120)
    assert (t["state"], t["destinationAmount"]["amount"]) == ("SCHEDULED", 1_500)
    source, destination = t["source"]["id"], t["destination"]["id"]
    balance = f"{c.programme.base_url}/multi/managed_accounts/{source}"
    assert httpx.get(balance, headers=c.headers).json()["balances"]["availableBalance"] == 1_500
    assert c.programme.advance(119) < int(t["scheduledTimestamp"])
    assert httpx.get(f"{base}/{t['id']}", headers=c.headers).json()["state"] == "SCHEDULED"
    assert c.programme.advance(1) >= int(t["scheduledTimestamp"])
    done = httpx.get(f"{base}/{t['id']}", headers=c.headers).json()
    assert done["state"] == "COMPLETED", done
    assert httpx.get(balance, headers=c.headers).json()["balances"]["availableBalance"] == 0

    # At a time of the programme's clock, between given accounts; run at once by the simulator.
    funded = c.account(funds=700)
    at = c.programme.now_ms() + 86_400_000
    again = c.schedule_transfer(700, at_ms=at, source=funded, destination=destination)
    assert (again["state"], again["scheduledTimestamp"]) == ("SCHEDULED", str(at))
    assert c.programme.scheduled_execute("transfers", again["id"]) == {"state": "SUCCESS"}
    # A clock moved past the session's 5 idle minutes: the customer logs in again.
    c.programme.advance(600)
    assert httpx.get(f"{base}/{again['id']}", headers=c.headers).status_code == 401
    c = c.login()
    assert httpx.get(f"{base}/{again['id']}", headers=c.headers).json()["state"] == "COMPLETED"


def test_a_trusted_beneficiary_is_paid_without_sca(multibank_customer):
    c = multibank_customer
    b = c.trusted_beneficiary(name="Grace Hopper")
    assert (b["state"], b["beneficiaryInformation"]) == ("ACTIVE", {"fullName": "Grace Hopper"})
    funded = c.account(funds=10_000)
    wire = {
        "profileId": c.programme.profiles["outgoingWireTransfers"],
        "sourceInstrument": {"type": "managed_accounts", "id": funded},
        "transferAmount": {"currency": "EUR", "amount": 5_000},
        "description": "Invoice 7",
        "destinationBeneficiary": {"beneficiaryId": b["id"]},
    }
    url = f"{c.programme.base_url}/3.63.4/multi/outgoing_wire_transfers"
    made = httpx.post(url, headers=c.headers, json=wire).json()
    assert (made["state"], made["challengeExemptionReason"]) == ("SUBMITTED", "TRUSTED_BENEFICIARY")


def test_each_test_has_a_programme_of_its_own(multibank_programme, multibank_server):
    assert multibank_programme.programme_id != multibank_server.programme_id
    assert multibank_programme.programme_id not in SEEN
    r = httpx.get(
        f"{multibank_programme.base_url}/multi/corporates", headers=multibank_programme.headers
    )
    assert r.status_code == 401
"""


def _run(command: list[str], cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{command}: {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _client_env() -> dict[str, str]:
    """The environment of a client's shell: none of this suite's settings, no source tree."""
    keep = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MULTIBANK_", "PYTEST_", "PYTHON", "VIRTUAL_ENV", "COV_"))
    }
    return keep


def test_a_client_project_runs_its_tests_on_the_installed_wheel(tmp_path):
    if os.environ.get("MULTIBANK_TEST_DB") == "postgres":
        # The plugin's server runs on its own SQLite file, whatever database this suite uses.
        pytest.skip("the plugin starts multibank on SQLite: the SQLite half runs this test")
    env = _client_env()
    dist, venv, project = tmp_path / "dist", tmp_path / "venv", tmp_path / "client"
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    python = venv / "bin" / "python"
    # uv when it is there (scripts/bootstrap.sh installs it), pip otherwise; either installs
    # from the package index the machine is configured with.
    if uv:
        _run([uv, "build", "--wheel", "--out-dir", str(dist), str(ROOT)], tmp_path, env)
        _run([uv, "venv", "-q", "-p", sys.executable, str(venv)], tmp_path, env)
    else:
        _run(
            [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(ROOT)],
            tmp_path,
            env,
        )
        _run([sys.executable, "-m", "venv", str(venv)], tmp_path, env)
    (wheel,) = dist.glob("multibank-*.whl")
    packages = [str(wheel), "pytest", "httpx"]
    if uv:
        _run([uv, "pip", "install", "-q", "-p", str(python), *packages], tmp_path, env)
    else:
        _run([str(python), "-m", "pip", "install", "-q", *packages], tmp_path, env)

    (project / "tests").mkdir(parents=True)
    (project / "tests" / "test_integration.py").write_text(textwrap.dedent(CLIENT_TESTS))
    env["MULTIBANK_LOG_LEVEL"] = "WARNING"
    done = subprocess.run(
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "5 passed" in out, out
    # The plugin came from the installed wheel, not from this source tree.
    where = _run(
        [str(python), "-c", "import multibank.testing.pytest_plugin as p; print(p.__file__)"],
        project,
        env,
    )
    assert Path(where.strip()).is_relative_to(venv), where
