"""Each version's description carries request examples that succeed as written on this server
(issue 14): with the `default` sandbox programme's profile ids, code 123456, and each step's
example following the last, a client replaying them signs up, verifies, logs in and opens an
account."""

from __future__ import annotations

from typing import Any

import httpx

from multibank.api import examples
from multibank.cli import ensure_default_programme


def example(spec: dict[str, Any], method: str, path: str) -> dict[str, Any]:
    op = spec["paths"][path][method]
    body: dict[str, Any] = op["requestBody"]["content"]["application/json"]["example"]
    return body


async def test_the_examples_take_a_client_from_sign_up_to_an_account(
    client: httpx.AsyncClient, container: Any
) -> None:
    description, _ = await ensure_default_programme(container.db)
    await examples.load(container.db)  # as the server does when it starts
    spec = (await client.get("/multi/openapi.json")).json()
    key = {"api-key": description.apiKey or ""}
    signup = example(spec, "post", "/corporates")
    assert signup["profileId"] == description.profiles.corporate
    r = await client.post("/multi/corporates", headers=key, json=signup)
    assert r.status_code == 200, r.text
    corporate = r.json()
    for path, status in (
        ("/corporates/verification/email/send", 204),
        ("/corporates/verification/email/verify", 204),
    ):
        r = await client.post(f"/multi{path}", headers=key, json=example(spec, "post", path))
        assert r.status_code == status, (path, r.text)
    user = corporate["rootUser"]["id"]["id"]
    body = example(spec, "post", "/passwords/{user_id}/create")
    r = await client.post(f"/multi/passwords/{user}/create", headers=key, json=body)
    assert r.status_code == 200, r.text
    r = await client.post(
        "/multi/login_with_password",
        headers=key,
        json=example(spec, "post", "/login_with_password"),
    )
    assert r.status_code == 200, r.text
    auth = {**key, "Authorization": f"Bearer {r.json()['token']}"}
    r = await client.post(
        f"/simulate/api/corporates/{corporate['id']['id']}/verify",
        headers={"programme-key": key["api-key"]},
    )
    assert r.status_code == 204
    account = example(spec, "post", "/managed_accounts")
    r = await client.post("/multi/managed_accounts", headers=auth, json=account)
    assert r.status_code == 200, r.text
    # The payment examples name the profiles too, and say which ids the client fills in.
    transfer = example(spec, "post", "/transfers")
    assert transfer["profileId"] == description.profiles.transfers
    assert transfer["source"]["id"] == "ACCOUNT_ID"
    old = (await client.get("/3.1.0/multi/openapi.json")).json()
    assert example(old, "post", "/corporates")["profileId"] == description.profiles.corporate
    # A new start names new e-mails: the examples sign up again (and later tests that replay
    # them with other passwords do not lock this user out).
    await examples.load(container.db)
    again = example((await client.get("/multi/openapi.json")).json(), "post", "/corporates")
    assert again["rootUser"]["email"] != signup["rootUser"]["email"]
