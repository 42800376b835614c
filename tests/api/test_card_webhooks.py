"""Card webhooks (D27, cards.md §7): each card event arrives signed, in its legacy shape, in the
order of the changes that caused it. The card-payment events are tested with the simulator's
steps; this file holds the events of the card's own lifecycle."""

from __future__ import annotations

from tests.api.test_managed_cards import LATEST, create
from tests.api.test_webhooks import deliver, hooked  # noqa: F401 (the fixture)
from tests.api.webhook_support import signed_by
from tests.factories import verified

STATE_CHANGE = "/hooks/managed_cards/state_change/watch"


async def test_block_unblock_renewal_change_and_remove_are_state_changes(
    client,
    container,
    hooked,  # noqa: F811
):
    p, receiver = hooked
    ident = await verified(client, p, "corporates")
    card = await create(client, ident)
    url = f"{LATEST}/managed_cards/{card['id']}"
    assert (await client.post(f"{url}/block", headers=ident.headers)).status_code == 204
    assert (await client.post(f"{url}/unblock", headers=ident.headers)).status_code == 204
    r = await client.patch(url, headers=ident.headers, json={"renewalType": "RENEW"})
    assert r.status_code == 200, r.text
    # The same renewal type again changes nothing and sends nothing.
    r = await client.patch(url, headers=ident.headers, json={"renewalType": "AUTO_RENEW"})
    assert r.status_code == 200, r.text
    assert (await client.post(f"{url}/remove", headers=ident.headers)).status_code == 204
    # A refused block sends nothing.
    assert (await client.post(f"{url}/block", headers=ident.headers)).status_code == 409
    await deliver(container)

    events = [r for r in receiver.received if r.path == STATE_CHANGE]
    assert [e.json["eventType"] for e in events] == ["BLOCKED", "UNBLOCKED", "ENABLED", "DESTROYED"]
    assert all(signed_by(p.api_key, e) for e in events)
    blocked, unblocked, enabled, destroyed = (e.json for e in events)
    assert blocked["id"] == {"type": "managed_cards", "id": card["id"]}
    assert blocked["state"] == {"state": "BLOCKED", "blockedReason": "USER"}
    assert blocked["cardType"] == "VIRTUAL" and blocked["renewalType"] == "NO_RENEW"
    assert blocked["timestamp"].isdigit()
    assert unblocked["state"] == {"state": "ACTIVE"}
    assert enabled["renewalType"] == "AUTO_RENEW" and enabled["state"] == {"state": "ACTIVE"}
    assert destroyed["state"] == {"state": "DESTROYED", "destroyedReason": "USER"}
