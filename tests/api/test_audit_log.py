"""The operator audit log (issue 35 §4, decision 0057), black-box over HTTP: each operator action
of the operator API and of the portal leaves exactly one record naming who did it, what, to what
and the settings it changed (before and after); a refused action leaves none, except a refused
sign-in, recorded on purpose; no secret appears in any record; the operator API's list needs the
admin token and pages; the database refuses to change or remove a record."""

from __future__ import annotations

import asyncio
import json
import re
import secrets
from typing import Any

import httpx
import pytest
from sqlalchemy import select, text, update
from sqlalchemy.exc import DBAPIError

from multibank.audit import chain
from multibank.audit.models import AuditRecord
from multibank.webhooks.models import WebhookEvent
from tests.api.test_managed_cards import create as create_card
from tests.api.test_portal_web import (
    PORTAL_API,
    landed,
    page,
    sign_in,
    signed_in_client,
    submit,
    submitted,
)
from tests.factories import open_account, sign_up, verified

AUDIT = "/portal/api/audit"


async def records(
    client: httpx.AsyncClient, headers: dict[str, str], pid: str | None = None, **query: Any
) -> list[dict[str, Any]]:
    """Every record asked for, newest first, read page by page."""
    url = f"{PORTAL_API}/{pid}/audit" if pid else AUDIT
    out: list[dict[str, Any]] = []
    while True:
        r = await client.get(
            url, headers=headers, params={**query, "offset": len(out), "limit": 100}
        )
        assert r.status_code == 200, r.text
        body = r.json()
        out.extend(body["records"])
        if len(out) >= body["count"] or not body["records"]:
            return out


def only(found: list[dict[str, Any]], action: str) -> dict[str, Any]:
    """The one record of `action`: there must be exactly one."""
    hits = [r for r in found if r["action"] == action]
    assert len(hits) == 1, (action, hits, [r["action"] for r in found])
    return hits[0]


def changes(record: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    return {c["field"]: (c["before"], c["after"]) for c in record["changes"]}


async def test_each_operator_api_action_leaves_one_record(client, admin_headers, programme):
    p = await programme()
    api = f"{PORTAL_API}/{p.id}"
    r = await client.patch(
        f"{api}/settings",
        headers=admin_headers,
        json={"failedLoginLimit": 9, "webhookUrl": "https://hooks.example.com/audit"},
    )
    assert r.status_code == 200, r.text
    r = await client.post(f"{api}/api_keys", headers=admin_headers, json={"label": "ci runner"})
    assert r.status_code == 201, r.text
    created = r.json()
    r = await client.delete(f"{api}/api_keys/{created['id']}", headers=admin_headers)
    assert r.status_code == 200, r.text
    profiles = (await client.get(f"{api}/profiles", headers=admin_headers)).json()
    sends = next(x for x in profiles if x["kind"] == "sends")
    r = await client.patch(
        f"{api}/profiles/{sends['id']}", headers=admin_headers, json={"fees": {"EUR": 77}}
    )
    assert r.status_code == 200, r.text
    r = await client.put(f"{api}/card_fees", headers=admin_headers, json={"purchase": {"EUR": 12}})
    assert r.status_code == 200, r.text
    r = await client.post(
        f"{api}/fee_types",
        headers=admin_headers,
        json={"name": "AUDITED", "amounts": {"DEFAULT": {"EUR": 5}}},
    )
    assert r.status_code == 201, r.text

    found = await records(client, admin_headers, p.id)
    assert {r["actor"] for r in found} == {"admin token"}
    assert all(r["programmeId"] == p.id for r in found)
    assert [r["action"] for r in found] == [
        "fee_type.create",
        "card_fee.set",
        "profile.update",
        "api_key.revoke",
        "api_key.create",
        "programme.settings",
    ]  # newest first
    settings = only(found, "programme.settings")
    assert changes(settings) == {
        "settings.failedLoginLimit": (5, 9),
        "settings.webhookUrl": (None, "https://hooks.example.com/audit"),
    }
    made = only(found, "api_key.create")
    [(field, (before, after))] = changes(made).items()
    assert field == f"apiKeys.{created['id']}" and before is None
    assert created["prefix"] in after and "ci runner" in after and "active" in after
    revoked = only(found, "api_key.revoke")
    assert revoked["target"] == {"kind": "api_key", "id": created["id"]}
    assert changes(revoked)[f"apiKeys.{created['id']}"][1].endswith("(revoked)")
    fee = only(found, "profile.update")
    assert fee["target"] == {"kind": "profile", "id": sends["id"]}
    assert changes(fee)[f"profiles.{sends['id']}.fees"][1]["EUR"] == 77
    card = changes(only(found, "card_fee.set"))["cardFees.purchase"]
    assert card[1]["EUR"] == 12 and card[0]["EUR"] != 12
    assert changes(only(found, "fee_type.create")) == {
        "feeTypes.AUDITED": (None, {"DEFAULT": {"EUR": 5}})
    }
    # No secret in any record: neither key's plaintext.
    dumped = json.dumps(found)
    assert created["apiKey"] not in dumped and p.api_key not in dumped


async def test_a_refused_api_action_leaves_no_record(client, admin_headers, programme):
    p = await programme()
    api = f"{PORTAL_API}/{p.id}"
    refused = [
        await client.patch(f"{api}/settings", headers=admin_headers, json={"failedLoginLimit": 0}),
        await client.post(  # a sandbox programme signs with its API key
            f"{api}/webhook_secret", headers=admin_headers
        ),
        await client.post(
            f"{api}/fee_types",
            headers=admin_headers,
            json={"name": "ADMIN_FEE", "amounts": {"DEFAULT": {"EUR": 5}}},
        ),
        await client.delete(f"{api}/api_keys/1", headers=admin_headers),
        await client.patch(f"{api}/settings", json={"failedLoginLimit": 8}),  # no admin token
    ]
    assert [r.status_code for r in refused] == [400, 409, 409, 404, 401]
    assert await records(client, admin_headers, p.id) == []


async def test_programme_creation_and_a_new_webhook_secret_show_no_secret(
    client, admin_headers, programme
):
    name = f"audit{secrets.token_hex(4)}"
    r = await client.post(PORTAL_API, headers=admin_headers, json={"name": name, "mode": "live"})
    assert r.status_code == 201, r.text
    described = r.json()
    pid = described["programmeId"]
    r = await client.post(f"{PORTAL_API}/{pid}/webhook_secret", headers=admin_headers)
    assert r.status_code == 200, r.text
    secret = r.json()["webhookSecret"]
    found = await records(client, admin_headers, pid)
    assert [r["action"] for r in found] == ["webhook_secret.rotate", "programme.create"]
    made = only(found, "programme.create")
    assert made["target"] == {"kind": "programme", "id": pid}
    after = {field: pair[1] for field, pair in changes(made).items()}
    assert after["settings.failedLoginLimit"] == 5
    assert any(field.startswith("apiKeys.") for field in after)
    dumped = json.dumps(found)
    assert described["apiKey"] not in dumped and secret not in dumped
    # The all-programmes list has them too.
    everything = await records(client, admin_headers, action="programme.create")
    assert made in everything


async def test_the_api_list_needs_the_admin_token_and_pages(client, admin_headers, programme):
    p = await programme()
    for url in (AUDIT, f"{PORTAL_API}/{p.id}/audit"):
        assert (await client.get(url)).status_code == 401
        wrong = {"Authorization": "Bearer " + "w" * 40}
        assert (await client.get(url, headers=wrong)).status_code == 401
    api = f"{PORTAL_API}/{p.id}"
    for limit in (3, 4, 5):
        r = await client.patch(
            f"{api}/settings", headers=admin_headers, json={"failedLoginLimit": limit}
        )
        assert r.status_code == 200
    first = (await client.get(f"{api}/audit?limit=2", headers=admin_headers)).json()
    second = (await client.get(f"{api}/audit?limit=2&offset=2", headers=admin_headers)).json()
    assert first["count"] == second["count"] == 3
    seen = [changes(r)["settings.failedLoginLimit"] for r in first["records"] + second["records"]]
    assert seen == [(4, 5), (3, 4), (5, 3)]
    filtered = await records(client, admin_headers, p.id, action="programme", actor="cli")
    assert filtered == []
    assert len(await records(client, admin_headers, p.id, action="programme")) == 3
    r = await client.get(f"{PORTAL_API}/{2**62}/audit", headers=admin_headers)
    assert r.status_code == 404


async def test_each_portal_action_leaves_one_record(app, client, admin_headers, programme):
    p = await programme()
    browser = await signed_in_client(app)
    try:
        home = f"/portal/programmes/{p.id}"
        assert await submitted(browser, f"{home}/settings", home, failedLoginLimit="6") == (
            "Settings saved."
        )
        r = await submit(browser, f"{home}/api_keys", home, label="portal key")
        key = re.search(r'id="new-key">([^<]+)<', await landed(browser, r))
        assert key
        keys = (await client.get(f"{PORTAL_API}/{p.id}/api_keys", headers=admin_headers)).json()
        labelled = next(k for k in keys if k["label"] == "portal key")
        revoke = f"{home}/api_keys/{labelled['id']}/revoke"
        assert await submitted(browser, revoke, revoke, confirm="yes") == "API key revoked."
        assert await submitted(
            browser, f"{home}/movement_fee", home, kind="sends", currency="EUR", amount="0.31"
        ) == ("Fee set.")
        assert await submitted(
            browser, f"{home}/card_fee", home, kind="refund", currency="EUR", amount="0.03"
        ) == ("Card fee set.")
        said = await submitted(browser, f"{home}/clock", home, seconds="3600")
        assert said.startswith("The clock moved on")
        # Refused: nothing changed, nothing recorded.
        bad = await landed(
            browser, await submit(browser, f"{home}/settings", home, failedLoginLimit="0")
        )
        assert 'class="flash error"' in bad
        found = await records(client, admin_headers, p.id)
        actors = {r["actor"] for r in found}
        assert len(actors) == 1 and next(iter(actors)).startswith("portal session ")
        assert [r["action"] for r in found] == [
            "clock.advance",
            "card_fee.set",
            "movement_fee.set",
            "api_key.revoke",
            "api_key.create",
            "programme.settings",
        ]
        assert changes(only(found, "programme.settings")) == {"settings.failedLoginLimit": (5, 6)}
        assert changes(only(found, "clock.advance")) == {"clockOffsetSeconds": (0, 3600)}
        revoked = only(found, "api_key.revoke")
        assert revoked["target"] == {"kind": "api_key", "id": labelled["id"]}
        assert key.group(1) not in json.dumps(found)
        # The session's sign-in names the same actor.
        sign_ins = await records(client, admin_headers, actor=next(iter(actors)))
        assert [r["action"] for r in sign_ins if r["programmeId"] is None] == ["portal.sign_in"]
        # The portal's pages show them, newest first, with a filter.
        html = await page(browser, f"{home}/audit")
        assert html.index("<code>clock.advance") < html.index("<code>programme.settings")
        assert 'data-label="Who"' in html and 'class="rows' in html
        assert "settings.failedLoginLimit: 5 → 6" in html
        filtered = await page(browser, f"{home}/audit?action=api_key")
        assert "<code>api_key.revoke</code>" in filtered
        assert "<code>clock.advance</code>" not in filtered
        everything = await page(browser, "/portal/audit")
        assert f"/portal/programmes/{p.id}/audit" in everything
        # Signing out is recorded too.
        await submit(browser, "/portal/logout", "/portal/")
        after = await records(client, admin_headers, actor=next(iter(actors)))
        assert after[0]["action"] == "portal.sign_out"
    finally:
        await browser.aclose()


async def test_a_refused_sign_in_is_recorded_on_purpose(client, admin_headers):
    before = await records(client, admin_headers, action="portal.sign_in_refused")
    wrong = await sign_in(client, "not-the-token")
    assert wrong.status_code == 401
    after = await records(client, admin_headers, action="portal.sign_in_refused")
    assert len(after) == len(before) + 1
    newest = after[0]
    assert newest["actor"] == "portal" and "wrong admin token" in (newest["note"] or "")
    assert "not-the-token" not in json.dumps(after)
    # An empty form guesses nothing and leaves nothing.
    assert (await sign_in(client, "")).status_code == 401
    assert len(await records(client, admin_headers, action="portal.sign_in_refused")) == len(after)


async def test_the_audit_pages_need_a_session(client, programme):
    p = await programme()
    for url in ("/portal/audit", f"/portal/programmes/{p.id}/audit"):
        r = await client.get(url)
        assert (r.status_code, r.headers.get("location")) == (303, "/portal/login"), url


async def test_the_database_refuses_to_change_or_remove_a_record(
    container, client, admin_headers, programme
):
    p = await programme()
    r = await client.patch(
        f"{PORTAL_API}/{p.id}/settings", headers=admin_headers, json={"failedLoginLimit": 4}
    )
    assert r.status_code == 200
    refused = [
        "UPDATE audit_records SET actor = 'someone else' WHERE programme_id = :p",
        "DELETE FROM audit_records WHERE programme_id = :p",
    ]
    if container.db.engine.dialect.name == "postgresql":
        refused.append("TRUNCATE audit_records")
    for sql in refused:
        with pytest.raises(DBAPIError, match="append-only"):
            async with container.db.engine.begin() as conn:
                await conn.execute(text(sql), {"p": int(p.id)})
    [kept] = await records(client, admin_headers, p.id)
    assert kept["actor"] == "admin token"


async def test_customer_account_and_card_actions_name_their_target(
    app, client, admin_headers, programme
):
    p = await programme()
    base = f"/portal/programmes/{p.id}"
    ident = await sign_up(client, p, "corporates")
    browser = await signed_in_client(app)
    try:
        detail = f"{base}/customers/{ident.id}"
        assert await submitted(browser, f"{detail}/verify", detail) == "Approved."
        r = await client.patch(
            f"{PORTAL_API}/{p.id}/settings",
            headers=admin_headers,
            json={"ibanAllocationDelaySeconds": 86400},
        )
        assert r.status_code == 200, r.text
        acc = (await open_account(client, ident, "EUR"))["id"]
        r = await client.post(f"/multi/managed_accounts/{acc}/iban", headers=ident.headers)
        assert r.status_code == 200, r.text
        said = await submitted(browser, f"{base}/accounts/{acc}/iban", detail)
        assert said.endswith(" allocated.")
        said = await submitted(browser, f"{base}/accounts/{acc}/deposit", detail, amount="5.00")
        assert said == "Deposited 5.00 EUR. COMPLETED"
        refused = await submitted(browser, f"{base}/accounts/{acc}/deposit", detail, amount="x")
        assert "written in EUR" in refused
    finally:
        await browser.aclose()
    api = f"{PORTAL_API}/{p.id}/managed_accounts/{acc}"
    assert (await client.post(f"{api}/block", headers=admin_headers)).status_code == 204
    # Blocked already: refused, not recorded.
    assert (await client.post(f"{api}/block", headers=admin_headers)).status_code == 409
    assert (await client.post(f"{api}/unblock", headers=admin_headers)).status_code == 204
    found = await records(client, admin_headers, p.id)
    assert [(r["action"], r["target"]) for r in found] == [
        ("account.unblock", {"kind": "account", "id": acc}),
        ("account.block", {"kind": "account", "id": acc}),
        ("account.deposit", {"kind": "account", "id": acc}),
        ("account.iban", {"kind": "account", "id": acc}),
        ("programme.settings", None),
        ("customer.verify", {"kind": "customer", "id": ident.id}),
    ]
    assert [r["actor"] for r in found][:2] == ["admin token", "admin token"]
    assert found[2]["actor"].startswith("portal session ")
    # Block and unblock say what they changed, before → after (issue 41 §5); the others
    # changed no setting and no state an operator sets.
    assert changes(found[1]) == {
        "account.state": ("ACTIVE", "BLOCKED"),
        "account.blockedReason": (None, "SYSTEM"),
    }
    assert changes(found[0]) == {
        "account.state": ("BLOCKED", "ACTIVE"),
        "account.blockedReason": ("SYSTEM", None),
    }
    assert all(r["changes"] == [] for r in found[2:] if r["action"] != "programme.settings")


async def test_each_record_carries_the_hash_of_the_one_before_with_concurrent_writers(
    container, client, admin_headers, programme
):
    """Issue 41 §5: the log is a hash chain, and stays one when many operator writes land at
    once (PostgreSQL: many connections; each record is its action's last write, taken in turn):
    seq 1, 2, 3 ... without a gap, each record's prev_hash the hash of the one before, each hash
    that of its own content."""
    progs = [await programme() for _ in range(4)]

    async def change(p: Any, limit: int) -> int:
        r = await client.patch(
            f"{PORTAL_API}/{p.id}/settings", headers=admin_headers, json={"failedLoginLimit": limit}
        )
        return r.status_code

    answers = await asyncio.gather(*(change(p, n) for n in (6, 7, 8) for p in progs))
    assert answers == [200] * 12
    async with container.db.transaction() as session:
        rows = list(await session.scalars(select(AuditRecord).order_by(AuditRecord.seq)))
        verdict = await chain.verify(session)
    assert [r.seq for r in rows] == list(range(1, len(rows) + 1))
    prev = chain.GENESIS
    for row in rows:
        assert row.prev_hash == prev and row.hash == chain.digest_of(row, prev)
        prev = row.hash
    assert verdict.broken_at is None and verdict.head_hash == rows[-1].hash
    mine = [r for r in rows if str(r.programme_id) in {p.id for p in progs}]
    assert len(mine) == 12
    # The operator API shows each record's place in the chain and its hash.
    by_id = {str(r.id): (r.seq, r.hash) for r in rows}
    shown = await records(client, admin_headers, progs[0].id)
    assert len(shown) == 3
    assert all((r["seq"], r["hash"]) == by_id[r["id"]] for r in shown)


async def test_blocks_redeliveries_and_the_card_pool_say_before_and_after(
    container, client, admin_headers, programme
):
    """Issue 41 §5: a card's block and unblock, a redelivery and a card pool record what they
    changed, before → after."""
    p = await programme()
    api = f"{PORTAL_API}/{p.id}"
    r = await client.patch(
        f"{api}/settings", headers=admin_headers, json={"webhookUrl": "https://hooks.example.com/a"}
    )
    assert r.status_code == 200, r.text
    ident = await verified(client, p)
    card = (await create_card(client, ident))["id"]
    for action in ("block", "unblock"):
        r = await client.post(f"{api}/managed_cards/{card}/{action}", headers=admin_headers)
        assert r.status_code == 204, r.text
    deliveries = (await client.get(f"{api}/webhooks/deliveries", headers=admin_headers)).json()
    event = deliveries["deliveries"][0]["id"]
    async with container.db.transaction() as session:  # as five failed attempts leave it
        await session.execute(
            update(WebhookEvent)
            .where(WebhookEvent.id == int(event))
            .values(state="FAILED", attempts=5, next_attempt_at=None)
        )
    r = await client.post(f"{api}/webhooks/deliveries/{event}/redeliver", headers=admin_headers)
    assert r.status_code == 200, r.text
    r = await client.post(
        f"{api}/card_pool",
        headers=admin_headers,
        json={"profileId": p.profiles["corporatePrepaidManagedCard"], "count": 2},
    )
    assert r.status_code == 201, r.text
    found = await records(client, admin_headers, p.id)
    assert changes(only(found, "card.block")) == {
        "card.state": ("ACTIVE", "BLOCKED"),
        "card.blockedReason": (None, "SYSTEM"),
    }
    assert changes(only(found, "card.unblock")) == {
        "card.state": ("BLOCKED", "ACTIVE"),
        "card.blockedReason": ("SYSTEM", None),
    }
    assert changes(only(found, "webhook_event.redeliver")) == {
        "delivery.state": ("FAILED", "PENDING"),
        "delivery.attempts": (5, 0),
    }
    pooled = only(found, "card_pool.create")
    assert pooled["target"] == {"kind": "card_pool", "id": p.id}
    assert changes(pooled) == {"cardPool.unassigned": (0, 2)}


async def test_a_settings_change_that_changes_nothing_is_not_recorded(
    app, client, admin_headers, programme
):
    """Issue 41 §5: saving the settings as they are (operator API or portal) records nothing;
    saving a change records it once."""
    p = await programme()
    api = f"{PORTAL_API}/{p.id}"
    same = [
        await client.patch(f"{api}/settings", headers=admin_headers, json={"failedLoginLimit": 5}),
        await client.patch(f"{api}/settings", headers=admin_headers, json={}),
    ]
    profiles = (await client.get(f"{api}/profiles", headers=admin_headers)).json()
    sends = next(x for x in profiles if x["kind"] == "sends")
    same.append(
        await client.patch(
            f"{api}/profiles/{sends['id']}", headers=admin_headers, json={"fees": sends["fees"]}
        )
    )
    assert [r.status_code for r in same] == [200, 200, 200]
    browser = await signed_in_client(app)
    try:
        home = f"/portal/programmes/{p.id}"
        assert await submitted(browser, f"{home}/settings", home, failedLoginLimit="5") == (
            "Settings saved."
        )
    finally:
        await browser.aclose()
    assert await records(client, admin_headers, p.id) == []
    r = await client.patch(f"{api}/settings", headers=admin_headers, json={"failedLoginLimit": 6})
    assert r.status_code == 200
    [kept] = await records(client, admin_headers, p.id)
    assert changes(kept) == {"settings.failedLoginLimit": (5, 6)}


async def test_simulator_clock_advances_are_recorded(client, admin_headers, programme):
    """Issue 41 §5: a programme's clock moved through the simulator is in the audit log as the
    portal's and the CLI's moves are, with the offset before and after."""
    p = await programme()
    for seconds in (3600, 60):
        r = await client.post(
            "/simulate/api/clock/advance",
            headers={"programme-key": p.api_key},
            json={"seconds": seconds},
        )
        assert r.status_code == 200, r.text
    found = await records(client, admin_headers, p.id, action="clock.advance")
    assert [(r["actor"], changes(r)) for r in found] == [
        ("simulator", {"clockOffsetSeconds": (3600, 3660)}),
        ("simulator", {"clockOffsetSeconds": (0, 3600)}),
    ]
