"""Each version's description carries request examples that succeed as written on this server
(issue 14): with the `default` sandbox programme's profile ids, code 123456, and each step's
example following the last, a client replaying them signs up, verifies, logs in and opens an
account. Every request example of every description is valid against its own operation's schema
(issue 32): a client or a validating proxy built from the description accepts it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from jsonschema_rs import Draft202012Validator

from multibank.api import examples
from multibank.cli import ensure_default_programme
from tests.openapi_conformance import BASES


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
    assert transfer["source"]["id"] == examples.PLACEHOLDER
    request_body = spec["paths"]["/transfers"]["post"]["requestBody"]
    assert "`source.id` and `destination.id`" in request_body["description"]
    old = (await client.get("/3.1.0/multi/openapi.json")).json()
    assert example(old, "post", "/corporates")["profileId"] == description.profiles.corporate
    # A new start names new e-mails: the examples sign up again (and later tests that replay
    # them with other passwords do not lock this user out).
    await examples.load(container.db)
    again = example((await client.get("/multi/openapi.json")).json(), "post", "/corporates")
    assert again["rootUser"]["email"] != signup["rootUser"]["email"]


def request_examples(doc: dict[str, Any]) -> Iterator[tuple[str, Any, dict[str, Any]]]:
    """(where, example, schema) of every request example of a description: request bodies'
    `example` and `examples`, and parameters' too."""
    for path, item in doc.get("paths", {}).items():
        for method, op in item.items():
            if not isinstance(op, dict):
                continue
            where = f"{method.upper()} {path}"
            for media, content in op.get("requestBody", {}).get("content", {}).items():
                schema = content.get("schema", {})
                if "example" in content:
                    yield f"{where} {media}", content["example"], schema
                for name, named in content.get("examples", {}).items():
                    yield f"{where} {media} {name}", named.get("value"), schema
            for param in op.get("parameters", []):
                schema = param.get("schema", {})
                if "example" in param:
                    yield f"{where} {param['name']}", param["example"], schema
                for name, named in param.get("examples", {}).items():
                    yield f"{where} {param['name']} {name}", named.get("value"), schema


def invalid_examples(doc: dict[str, Any]) -> tuple[int, list[str]]:
    """How many request examples the description has, and what is wrong with each bad one."""
    count, wrong = 0, []
    for where, value, schema in request_examples(doc):
        count += 1
        validator = Draft202012Validator(
            {**schema, "components": doc.get("components", {})}, validate_formats=True
        )
        errors = list(validator.iter_errors(value))
        if errors:
            wrong.append(f"{where}: {errors[0].message} at {list(errors[0].instance_path)}")
    return count, wrong


@pytest.mark.parametrize("loaded", [False, True], ids=["no default programme", "default"])
async def test_every_request_example_is_valid_against_its_schema(
    client: httpx.AsyncClient, container: Any, monkeypatch: pytest.MonkeyPatch, loaded: bool
) -> None:
    """On a server without the `default` programme (its profile ids unknown) and on one with
    it, each description's request examples pass its own schemas: an id to fill in is digits
    that name nothing, never a word that breaks the id's pattern."""
    monkeypatch.setattr(examples, "PROFILES", {})
    if loaded:
        await ensure_default_programme(container.db)
        await examples.load(container.db)
        assert examples.PROFILES
    found = 0
    for base in BASES:
        doc = (await client.get(f"{base}/openapi.json")).json()
        count, wrong = invalid_examples(doc)
        assert not wrong, f"{base}: " + "\n".join(wrong)
        found += count
    assert found >= 40  # every version's sign-up, verification, login, account and payments
