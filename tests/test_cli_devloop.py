"""The developer loop of issue 35 (decision 0051): `webhooks trigger`, `webhooks replay`,
`programme reset`, `programme export` / `import`, run in-process as tests/test_cli.py runs the
CLI, on the test session's database (SQLite or PostgreSQL), checked through the API, the operator
API and a real webhook receiver."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from multibank.cli import app as cli_app
from multibank.devloop.listen import listen
from multibank.devloop.transfer import _is_id_column
from multibank.devloop.trigger import NOT_YET, TRIGGERS
from multibank.webhooks import events
from multibank.webhooks.models import WebhookEvent
from tests.api.test_webhooks import deliver
from tests.api.webhook_support import receiving, signed_by
from tests.test_cli import cli, cli_database, ok, unique_name

PORTAL = "/portal/api/programmes"


@pytest.fixture
def cli_env(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The CLI works on the test session's database, which the `client` fixture also serves."""
    with cli_database(monkeypatch, database_url):
        yield


async def new_programme(*options: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(
        ok(await cli("programme", "create", "--name", unique_name(), "--json", *options))
    )
    return out


async def name_of(client: httpx.AsyncClient, admin: dict[str, str], pid: str) -> str:
    r = await client.get(f"{PORTAL}/{pid}", headers=admin)
    assert r.status_code == 200, r.text
    name: str = r.json()["name"]
    return name


async def seeded(name: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(
        ok(await cli("sandbox", "seed", "--programme", name, "--json"))
    )
    return out


def refused(result: Any, code: int = 1) -> str:
    assert result.exit_code == code, (result.exit_code, result.output, result.exception)
    assert "Traceback" not in result.output
    err: str = result.stderr
    return err


# webhooks trigger


def test_every_path_the_server_emits_has_a_trigger() -> None:
    """TRIGGERS is the one table of what can be triggered: a path added to the server without a
    trigger fails here, unless listed (with why) in NOT_YET."""
    triggered = {f"/{kind.rsplit('.', 1)[0]}/watch" for kind in TRIGGERS}
    emitted = set(events.paths())  # as each slice registered them (the trigger imports all)
    assert triggered <= emitted
    assert emitted - triggered == set(NOT_YET)


async def test_trigger_writes_the_real_event_and_replay_sends_it_again(
    cli_env, client, container, admin_headers
):
    with receiving() as receiver:
        made = await new_programme("--webhook-url", receiver.url)
        name = await name_of(client, admin_headers, made["programmeId"])
        out = ok(await cli("webhooks", "trigger", "transfers.COMPLETED", "--programme", name))
        event_id, kind = out.splitlines()[0].split("\t")
        assert kind == "transfers.COMPLETED"
        # The operator API shows it as any event the API writes.
        r = await client.get(
            f"{PORTAL}/{made['programmeId']}/webhooks/deliveries/{event_id}", headers=admin_headers
        )
        assert r.status_code == 200, r.text
        await deliver(container)
        transfers = [x for x in receiver.received if x.path.endswith("/transfers/watch")]
        assert [x.json["eventType"] for x in transfers] == ["COMPLETED"]
        first = transfers[0]
        assert signed_by(made["apiKey"], first)

        # Replayed to the programme's URL: the same bytes under the same call-ref, signed anew.
        line = ok(await cli("webhooks", "replay", event_id))
        assert "HTTP 204" in line and first.call_ref in line
        again = [x for x in receiver.received if x.path.endswith("/transfers/watch")]
        assert len(again) == 2
        assert (again[1].call_ref, again[1].body) == (first.call_ref, first.body)
        assert signed_by(made["apiKey"], again[1])

    # ... or to another receiver (a listener), given with --to.
    with receiving() as listener:
        ok(await cli("webhooks", "replay", event_id, "--to", listener.url))
        assert [x.call_ref for x in listener.received] == [first.call_ref]
        assert listener.received[0].path.endswith("/transfers/watch")
        assert signed_by(made["apiKey"], listener.received[0])
        # ... by its call-ref too, as a receiver logs it.
        line = ok(await cli("webhooks", "replay", first.call_ref, "--to", listener.url))
        assert line.startswith(f"event {event_id} transfers.COMPLETED call-ref {first.call_ref}")
        assert [x.call_ref for x in listener.received] == [first.call_ref] * 2
        listener.answer = lambda path, n: (500, b"no", {})
        err = refused(await cli("webhooks", "replay", event_id, "--to", listener.url))
        assert "HTTP 500" in err


# One of each kind of step (the simulator's KYC, wire transfer and card steps, a payment waiting
# for SCA, a scheduled payment cancelled through the 3.63 line); transfers.COMPLETED above. Each
# run makes its own customers.
@pytest.mark.parametrize(
    "event",
    [
        "consumers/kyc.REJECTED",
        "outgoing_wire_transfers.RETURNED",
        "managed_cards/expiries.CARD_EXPIRED",
        "send.PENDING_CHALLENGE",
        "send.CANCELLED",
        "managed_cards/settlements.SALE_PURCHASE",
        "managed_cards/adjustments.LOST_STOLEN_REPLACEMENT_BALANCE_TRANSFER",
    ],
)
async def test_trigger_makes_the_event_arrive(event, cli_env, client, container, admin_headers):
    with receiving() as receiver:
        made = await new_programme("--webhook-url", receiver.url)
        name = await name_of(client, admin_headers, made["programmeId"])
        ok(await cli("webhooks", "trigger", event, "--programme", name))
        await deliver(container)
        topic, kind = event.rsplit(".", 1)
        got = [x for x in receiver.received if x.path.endswith(f"/{topic}/watch")]
        fields = ("eventType", "status", "type", "settlementType", "adjustmentType")
        assert kind in [next(x.json[f] for f in fields if f in x.json) for x in got], got
        assert all(signed_by(made["apiKey"], x) for x in got)


# What each event cannot happen without (issue 41 §2): the events the same action, or the steps
# of the same resource it needs, write. Every other change a trigger makes (customers, logins,
# accounts, IBANs, money, cards) sets the stage and writes no event.
COMPANIONS: dict[str, set[str]] = {
    "ibans.CREATED": {"ibans.REQUESTED"},
    "managed_accounts.UNBLOCKED": {"managed_accounts.BLOCKED"},
    "managed_cards/state_change.UNBLOCKED": {"managed_cards/state_change.BLOCKED"},
    "managed_cards/expiries.CARD_EXPIRED": {"managed_cards/state_change.DESTROYED"},
    "managed_cards/replacement.PHYSICAL_REPLACEMENT": {
        "managed_cards/physical_cards_upgrade.REQUESTED"
    },
    "managed_cards/adjustments.LOST_STOLEN_REPLACEMENT_BALANCE_TRANSFER": {
        "managed_cards/state_change.DESTROYED",
        "managed_cards/physical_cards_upgrade.REQUESTED",
        "managed_cards/replacement.PHYSICAL_REPLACEMENT",
    },
    "managed_cards/settlements.SALE_PURCHASE": {"managed_cards/authorisations.AUTHORISED"},
    "outgoing_wire_transfers.SUBMITTED": {"outgoing_wire_transfers.PENDING_CHALLENGE"},
    **{
        f"outgoing_wire_transfers.{end}": {
            "outgoing_wire_transfers.PENDING_CHALLENGE",
            "outgoing_wire_transfers.SUBMITTED",
        }
        for end in ("COMPLETED", "REJECTED")
    },
    "outgoing_wire_transfers.RETURNED": {
        "outgoing_wire_transfers.PENDING_CHALLENGE",
        "outgoing_wire_transfers.SUBMITTED",
        "outgoing_wire_transfers.COMPLETED",
    },
    "outgoing_wire_transfers.CANCELLED": {"outgoing_wire_transfers.PENDING_CONFIRMATION"},
    "beneficiaries/batch.CHALLENGE_COMPLETED": {"beneficiaries/batch.PENDING_CHALLENGE"},
    "linked_accounts.VERIFIED": {"linked_accounts.PENDING_VERIFICATION"},
    "linked_accounts.REJECTED": {"linked_accounts.PENDING_VERIFICATION"},
    # A scheduled payment within the low-value exemption is SCHEDULED at once (no challenge);
    # its cancel cannot be without it.
    "transfers.CANCELLED": {"transfers.SCHEDULED"},
    "send.CANCELLED": {"send.SCHEDULED"},
}


@pytest.mark.parametrize("event", sorted(TRIGGERS))
async def test_trigger_makes_only_the_event_and_what_it_cannot_happen_without(
    event, cli_env, client, container, admin_headers
):
    made = await new_programme("--webhook-url", "http://127.0.0.1:9/hooks")
    name = await name_of(client, admin_headers, made["programmeId"])
    result = await cli("webhooks", "trigger", event, "--programme", name)
    out = ok(result)
    async with container.db.transaction() as session:
        rows = (
            await session.execute(
                select(WebhookEvent.id, WebhookEvent.event_type).where(
                    WebhookEvent.programme_id == int(made["programmeId"])
                )
            )
        ).all()
    written = {kind for _, kind in rows}
    assert written == {event} | COMPANIONS.get(event, set()), written
    # Said: the event's id on stdout, each companion's on stderr.
    asked = sorted(str(i) for i, kind in rows if kind == event)
    assert out.splitlines() == [f"{i}\t{event}" for i in asked]
    others = sorted(f"  {i}\t{kind}" for i, kind in rows if kind != event)
    said = result.stderr.splitlines()
    heading = "with it, as it cannot happen without them:"
    if others:
        start = said.index(heading) + 1
        assert sorted(said[start : start + len(others)]) == others
    else:
        assert heading not in said


async def test_trigger_refusals(cli_env, client, admin_headers):
    err = refused(await cli("webhooks", "trigger", "login.VERIFIED", "--programme", unique_name()))
    assert "not found" in err
    hooked = await new_programme("--webhook-url", "http://127.0.0.1:9/hooks")
    name = await name_of(client, admin_headers, hooked["programmeId"])
    err = refused(await cli("webhooks", "trigger", "nothing.HAPPENED", "--programme", name))
    assert "unknown event type 'nothing.HAPPENED'" in err and "transfers.COMPLETED" in err
    bare = await new_programme()
    err = refused(
        await cli(
            "webhooks",
            "trigger",
            "login.VERIFIED",
            "--programme",
            await name_of(client, admin_headers, bare["programmeId"]),
        )
    )
    assert "no webhook URL" in err
    live = await new_programme("--live")
    lname = await name_of(client, admin_headers, live["programmeId"])
    err = refused(await cli("webhooks", "trigger", "login.VERIFIED", "--programme", lname))
    assert "live programme" in err
    listed = ok(await cli("webhooks", "trigger", "--list")).split()
    assert listed == sorted(TRIGGERS)


async def test_replay_reaches_webhooks_listen(cli_env, container, client, admin_headers):
    """`webhooks listen` points the programme at itself: a trigger's event replayed (no --to)
    arrives there with both signatures verifying."""
    made = await new_programme()
    name = await name_of(client, admin_headers, made["programmeId"])
    lines: list[str] = []
    stop = asyncio.Event()
    listening = asyncio.create_task(listen(container.db, name, "127.0.0.1", 0, lines.append, stop))
    try:
        for _ in range(100):
            if lines:
                break
            await asyncio.sleep(0.05)
        assert lines and lines[0].startswith("listening on"), lines
        out = ok(await cli("webhooks", "trigger", "managed_accounts.UPDATED", "--programme", name))
        event_id = out.split("\t")[0]
        ok(await cli("webhooks", "replay", event_id))
        got = [line for line in lines if "POST /managed_accounts/watch" in line]
        assert len(got) == 1, lines
        # The id printed is the one trigger printed and replay takes.
        assert (
            f"  event {event_id}  POST /managed_accounts/watch  managed_accounts UPDATED" in got[0]
        )
        assert got[0].endswith("signature ok  signature-v2 ok"), got
    finally:
        stop.set()
        await listening


async def test_listen_forward_to_is_an_option_of_the_command(cli_env, client, admin_headers):
    made = await new_programme()
    name = await name_of(client, admin_headers, made["programmeId"])
    listen_ = ("webhooks", "listen", "--programme", name, "--port", "0")
    err = refused(await cli(*listen_, "--forward-to", "ftp://127.0.0.1/"))
    assert err == "cannot forward to 'ftp://127.0.0.1/': not an http(s) base URL\n"
    help_ = ok(await cli("webhooks", "listen", "--help"))
    assert "--forward-to" in help_ and "event id" in help_


async def test_replay_refusals(cli_env):
    for unknown in ("1", "x", "9" * 30, "0" * 32):
        err = refused(await cli("webhooks", "replay", unknown))
        assert "not found" in err


# programme reset


async def test_reset_empties_a_sandbox_programme_and_keeps_its_keys_and_settings(
    cli_env, client, admin_headers
):
    made = await new_programme("--step-up-required")
    name = await name_of(client, admin_headers, made["programmeId"])
    who = (await seeded(name))["consumer"]
    key = {"api-key": made["apiKey"]}
    account = f"/multi/managed_accounts/{who['accountId']}"
    r = await client.get(account, headers={**key, "authorization": f"Bearer {who['token']}"})
    assert r.status_code == 200

    out = ok(await cli("programme", "reset", name, "--yes"))
    after = json.loads(ok(await cli("programme", "show", name, "--json")))
    assert after["programmeId"] != made["programmeId"]
    assert f"id {after['programmeId']}" in out
    # Said plainly, here and in the README (issue 41 §2): the id cannot stay.
    assert "the id changed (the ledger never forgets the old one's money)" in out
    readme = (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")
    assert "**`programme reset` gives the programme a new id.**" in readme
    assert "The id cannot stay: the ledger is\nappend-only" in readme
    assert {k: v for k, v in after.items() if k != "programmeId"} == {
        k: v for k, v in made.items() if k != "programmeId"
    }  # same key, profile ids, currencies, fees
    r = await client.get(f"{PORTAL}/{after['programmeId']}", headers=admin_headers)
    assert r.json()["settings"]["stepUpRequired"] is True
    # The old programme is shown nowhere, its customers are gone, the key works.
    r = await client.get(f"{PORTAL}/{made['programmeId']}", headers=admin_headers)
    assert r.status_code == 404
    r = await client.get(PORTAL, headers=admin_headers)
    assert made["programmeId"] not in {p["programmeId"] for p in r.json()}
    assert made["programmeId"] not in ok(await cli("programme", "list"))
    r = await client.get(account, headers={**key, "authorization": f"Bearer {who['token']}"})
    assert r.status_code in (401, 403), r.text  # a token of the old programme opens nothing
    r = await client.post(
        "/multi/login_with_password",
        headers=key,
        json={"email": who["email"], "password": {"value": who["password"]}},
    )
    assert r.status_code == 403
    again = (await seeded(name))["consumer"]  # the same programme works as new
    assert again["accountId"] != who["accountId"]
    assert ok(await cli("ledger", "verify")).strip() == "ledger verify: ok"


async def test_reset_refusals(cli_env, client, admin_headers):
    err = refused(await cli("programme", "reset", unique_name(), "--yes"))
    assert "not found" in err
    live = await new_programme("--live")
    lname = await name_of(client, admin_headers, live["programmeId"])
    err = refused(await cli("programme", "reset", lname, "--yes"))
    assert "live programme" in err
    made = await new_programme()
    name = await name_of(client, admin_headers, made["programmeId"])
    answered = await asyncio.to_thread(
        CliRunner().invoke, cli_app, ["programme", "reset", name], input="n\n"
    )
    assert answered.exit_code == 1 and "not reset" in answered.stderr
    shown = json.loads(ok(await cli("programme", "show", name, "--json")))
    assert shown["programmeId"] == made["programmeId"]


# programme export / import

# Values an import makes anew, and the id columns it maps: compared by shape only.
RENEWED = ("system_key", "dd_reference", "kyc_reference", "iban", "account_number")
RENEWED += ("external_handle", "number_encrypted", "pin_encrypted", "value_encrypted")
LONG_DIGITS = re.compile(r"^[0-9]{15,19}$")


def content(document: dict[str, Any]) -> dict[str, list[str]]:
    """The document's rows without their ids or renewed values, in a stable order."""

    def scrub(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: scrub(v) for k, v in value.items()}
        if isinstance(value, list):
            return [scrub(v) for v in value]
        if isinstance(value, str) and LONG_DIGITS.match(value):
            return "ID"
        return value

    out = {}
    for table, rows in document["tables"].items():
        kept = [
            json.dumps(
                {k: scrub(v) for k, v in row.items() if not _is_id_column(k) and k not in RENEWED},
                sort_keys=True,
            )
            for row in rows
        ]
        out[table] = sorted(kept)
    return out


async def test_export_import_round_trip(cli_env, client, admin_headers, tmp_path):
    made = await new_programme("--webhook-url", "http://127.0.0.1:9/hooks")
    name = await name_of(client, admin_headers, made["programmeId"])
    who = (await seeded(name))["corporate"]
    for event in (
        "send.COMPLETED",  # payments
        "managed_cards/authorisations.AUTHORISED",  # a card
        "beneficiaries/batch.CHALLENGE_COMPLETED",  # the 3.63 line's trusted beneficiaries
        "linked_accounts.VERIFIED",  # and linked accounts
    ):
        ok(await cli("webhooks", "trigger", event, "--programme", name))
    exported = ok(await cli("programme", "export", name))
    first = json.loads(exported)
    assert first["version"] == 2
    for table in ("identities", "users", "postings", "payments", "managed_cards"):
        assert first["tables"][table], table
    for table in (
        "beneficiary_batches",
        "beneficiaries",
        "linked_accounts",
        "linked_account_runs",
        "linked_account_steps",
    ):
        assert first["tables"][table], table
    for table in ("card_authorisations", "card_movements"):
        assert first["tables"][table], table
    assert "password" not in json.dumps(first["tables"]["users"]).replace("password_", "")
    assert who["password"] not in json.dumps(first)
    file = tmp_path / "fixture.json"
    ok(await cli("programme", "export", name, "--out", str(file)))
    copy_name = unique_name()
    imported = json.loads(
        ok(await cli("programme", "import", str(file), "--name", copy_name, "--json"))
    )
    assert imported["programmeId"] != made["programmeId"]
    assert imported["apiKey"] != made["apiKey"]
    assert ok(await cli("ledger", "verify", "--programme", copy_name)).strip() == (
        "ledger verify: ok"
    )
    second = json.loads(ok(await cli("programme", "export", copy_name)))
    assert content(second) == content(first)
    assert second["programme"]["settings"] == first["programme"]["settings"]
    # The copy's customer logs in with the same password and finds the money under new ids.
    key = {"api-key": imported["apiKey"]}
    r = await client.post(
        "/multi/login_with_password",
        headers=key,
        json={"email": who["email"], "password": {"value": who["password"]}},
    )
    assert r.status_code == 200, r.text
    headers = {**key, "authorization": f"Bearer {r.json()['token']}"}
    r = await client.get("/multi/managed_accounts", headers=headers)
    assert r.status_code == 200, r.text
    accounts = r.json()["accounts"]
    assert [a["balances"]["availableBalance"] for a in accounts] == [100_000]
    assert accounts[0]["id"] != who["accountId"]
    r = await client.get(f"/multi/managed_accounts/{accounts[0]['id']}/iban", headers=headers)
    assert r.json()["state"] == "ALLOCATED"
    iban = r.json()["bankAccountDetails"][0]["details"]["iban"]
    assert iban.startswith(who["iban"][:2]) and iban != who["iban"]  # its own
    # The original is untouched.
    assert json.loads(ok(await cli("programme", "export", name))) == first
    # A document written before the 3.63 line's tables still imports, with none of their rows.
    older = json.loads(exported)
    for table in (
        "batch_challenges",
        "beneficiary_batches",
        "beneficiaries",
        "linked_accounts",
        "linked_account_runs",
        "linked_account_steps",
    ):
        del older["tables"][table]
    file.write_text(json.dumps(older))
    ok(await cli("programme", "import", str(file), "--name", unique_name()))


def as_jq_reads_it(text: str) -> str:
    """`text` through a JSON tool that reads numbers as doubles (jq 1.6): a 64-bit integer
    comes out rounded."""
    return json.dumps(json.loads(text, parse_int=lambda digits: int(float(digits))))


def as_version_1(document: dict[str, Any], webhook_url: str | None) -> dict[str, Any]:
    """`document` as the first version wrote it: integers as numbers, the webhook URL in."""

    def number(key: str, value: Any) -> Any:
        return int(value) if (_is_id_column(key) and isinstance(value, str)) else value

    tables = {
        table: [{k: number(k, v) for k, v in row.items()} for row in rows]
        for table, rows in document["tables"].items()
    }
    settings = {**document["programme"]["settings"], "webhook_url": webhook_url}
    programme = {**document["programme"], "id": int(document["programme"]["id"])}
    return {
        **document,
        "version": 1,
        "programme": {**programme, "settings": settings},
        "tables": tables,
    }


async def test_export_writes_ids_as_strings_and_the_webhook_url_only_when_asked(
    cli_env, client, admin_headers, tmp_path
):
    """Ids survive a JSON tool that rounds 64-bit integers; the webhook URL (which may name a
    developer's machine) stays out of a shared fixture unless asked for; an import reads this
    form, what jq made of it, and the first version's integers with the URL."""
    hook = "http://127.0.0.1:9/hooks"
    made = await new_programme("--webhook-url", hook)
    name = await name_of(client, admin_headers, made["programmeId"])
    ok(
        await cli(
            "webhooks", "trigger", "managed_cards/authorisations.AUTHORISED", "--programme", name
        )
    )
    exported = ok(await cli("programme", "export", name))
    document = json.loads(exported)
    assert document["programme"]["id"] == made["programmeId"]
    assert "webhook_url" not in document["programme"]["settings"] and hook not in exported
    ids = [
        (table, k, v)
        for table, rows in document["tables"].items()
        for row in rows
        for k, v in row.items()
        if _is_id_column(k) and v is not None
    ]
    assert ids and all(isinstance(v, str) and v.isdigit() for _, _, v in ids), ids[:3]
    numbers: list[int] = []
    json.loads(exported, parse_int=lambda digits: numbers.append(int(digits)))
    assert numbers and max(map(abs, numbers)) < 2**53  # no number a double cannot hold
    with_url = json.loads(ok(await cli("programme", "export", name, "--with-webhook-url")))
    assert with_url["programme"]["settings"]["webhook_url"] == hook

    versions = {
        "jq": (as_jq_reads_it(exported), None),
        "v1": (json.dumps(as_version_1(document, hook)), hook),
    }
    for form, (text, url) in versions.items():
        file = tmp_path / f"{form}.json"
        file.write_text(text)
        copy_name = unique_name()
        imported = json.loads(
            ok(await cli("programme", "import", str(file), "--name", copy_name, "--json"))
        )
        again = json.loads(ok(await cli("programme", "export", copy_name, "--with-webhook-url")))
        assert content(again) == content(document), form
        assert again["programme"]["settings"]["webhook_url"] == url, form
        verified = ok(await cli("ledger", "verify", "--programme", copy_name))
        assert verified.strip() == "ledger verify: ok"
        assert imported["programmeId"] != made["programmeId"]


def with_rows(document: dict[str, Any], table: str, **changed: Any) -> dict[str, Any]:
    """`document` with every row of `table` changed so."""
    rows = [{**row, **changed} for row in document["tables"][table]]
    return {**document, "tables": {**document["tables"], table: rows}}


async def test_export_and_import_refusals(cli_env, client, admin_headers, tmp_path):
    err = refused(await cli("programme", "export", unique_name()))
    assert "not found" in err
    live = await new_programme("--live")
    lname = await name_of(client, admin_headers, live["programmeId"])
    assert "live programme" in refused(await cli("programme", "export", lname))
    made = await new_programme()
    name = await name_of(client, admin_headers, made["programmeId"])
    good = json.loads(ok(await cli("programme", "export", name)))
    file = tmp_path / "f.json"
    cases = [
        ("{not json", "unreadable"),
        (json.dumps({**good, "version": 99}), "version 99 is not known"),
        (json.dumps({"format": "else"}), "not a multibank programme export"),
        (json.dumps({**good, "tables": {**good["tables"], "users": [{"id": 1}]}}), "users"),
        (
            json.dumps(
                {
                    **good,
                    "programme": {
                        **good["programme"],
                        "settings": {**good["programme"]["settings"], "failed_login_limit": "x"},
                    },
                }
            ),
            "setting failed_login_limit is not valid",
        ),
        (
            json.dumps(with_rows(good, "fee_types", id="one")),
            "a row of fee_types has an invalid id",
        ),
        (json.dumps(with_rows(good, "fee_types", name=None)), "fee_types has an invalid name"),
        (json.dumps(with_rows(good, "profiles", active="yes")), "profiles has an invalid active"),
    ]
    for text, says in cases:
        file.write_text(text)
        err = refused(await cli("programme", "import", str(file), "--name", unique_name()))
        assert says in err, err
    file.write_text(json.dumps(good))
    err = refused(await cli("programme", "import", str(file), "--name", name))
    assert "PROGRAMME_NAME_NOT_UNIQUE" in err
    err = refused(await cli("programme", "import", str(tmp_path / "none.json"), "--name", "x"))
    assert "unreadable" in err
    # Nothing of the refused imports was written.
    listed = ok(await cli("programme", "list"))
    assert listed.count(f"\t{name}\t") == 1
