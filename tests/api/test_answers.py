"""The hot reads' answers written once (api/answers.py, issue 40 §5) are byte for byte what their
route's `response_model` path writes for the same dict: FastAPI's validation of the dict into
the route's response field, then its serialisation with the route's options (exclude_none, by
alias, ...). Checked on the dicts the endpoints build from the database, on both versions, and on
hand-made ones with every optional field, none, keys out of order and keys the model lacks."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute
from pydantic import BaseModel, Field
from starlette.routing import Mount

from multibank.api import answers
from multibank.api.answers import Answer, plan_of
from tests.conftest import Prog, ProgrammeFactory
from tests.factories import open_account, verified

BOTH = ("/multi", "/3.1.0/multi")
HOT = {
    ("GET", "/managed_accounts/{id}"),
    ("GET", "/managed_accounts"),
    ("GET", "/corporates"),
    ("GET", "/consumers"),
}


def route_of(app: Any, base: str, method: str, path: str) -> APIRoute:
    mount = next(r for r in app.routes if isinstance(r, Mount) and r.path == base)
    assert isinstance(mount.app, FastAPI)
    for route in mount.app.routes:
        if isinstance(route, APIRoute) and route.path == path and method in route.methods:
            return route
    raise LookupError(path)


def model_path(route: APIRoute, body: Any) -> bytes:
    """What FastAPI sends for `body` returned by an endpoint of `route` (its handler's
    `serialize_response` with `dump_json`, the path of a route with a response model)."""
    field = route.response_field
    assert field is not None
    value, errors = field.validate(body, {}, loc=("response",))
    assert not errors, errors
    encoded: bytes = field.serialize_json(
        value,
        include=route.response_model_include,
        exclude=route.response_model_exclude,
        by_alias=route.response_model_by_alias,
        exclude_unset=route.response_model_exclude_unset,
        exclude_defaults=route.response_model_exclude_defaults,
        exclude_none=route.response_model_exclude_none,
    )
    return encoded


@pytest.fixture
def written(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[Answer, Any, bytes]]]:
    """Every (answer, dict, bytes) the hot reads write while the test runs."""
    seen: list[tuple[Answer, Any, bytes]] = []
    encode = Answer.encode

    def record(self: Answer, body: Any) -> bytes:
        out = encode(self, body)
        seen.append((self, body, out))
        return out

    monkeypatch.setattr(Answer, "encode", record)
    yield seen


@pytest.mark.parametrize("base", BOTH)
async def test_the_hot_reads_write_what_their_response_model_writes(
    client: httpx.AsyncClient,
    programme: ProgrammeFactory,
    app: Any,
    written: list[tuple[Answer, Any, bytes]],
    base: str,
) -> None:
    p: Prog = await programme()
    corporate = await verified(client, p, "corporates", base)
    consumer = await verified(client, p, "consumers", base)
    account = await open_account(client, corporate, base=base)
    await open_account(client, corporate, currency="GBP", base=base, tag="t-1")
    requests = [
        ("/managed_accounts/{id}", f"/managed_accounts/{account['id']}", corporate, {}),
        ("/managed_accounts", "/managed_accounts", corporate, {}),
        ("/managed_accounts", "/managed_accounts", corporate, {"limit": 1, "offset": 1}),
        ("/managed_accounts", "/managed_accounts", corporate, {"profileId": "9" * 19}),
        ("/managed_accounts", "/managed_accounts", consumer, {}),
        ("/corporates", "/corporates", corporate, {}),
        ("/consumers", "/consumers", consumer, {}),
    ]
    for template, path, who, query in requests:
        written.clear()
        r = await client.get(f"{base}{path}", headers=who.headers, params=query)
        assert r.status_code == 200, r.text
        assert r.headers["content-type"] == "application/json"
        assert len(written) == 1, f"{path} is written by its Answer"
        _, body, out = written[0]
        assert r.content == out
        assert out == model_path(route_of(app, base, "GET", template), body), path


def test_every_hot_read_declares_the_model_its_answer_writes(app: Any) -> None:
    """The OpenAPI description stays the route's: its response model is the Answer's model,
    and it is written with `exclude_none`, as `Answer` writes it."""
    from multibank.api.v3_29 import consumers, corporates, managed_accounts

    written_by = {
        "/managed_accounts/{id}": managed_accounts.ACCOUNT,
        "/managed_accounts": managed_accounts.PAGE,
        "/corporates": corporates.CORPORATE_ANSWER,
        "/consumers": consumers.CONSUMER_ANSWER,
    }
    for base in BOTH:
        for method, path in HOT:
            route = route_of(app, base, method, path)
            assert route.response_model is written_by[path].model
            assert route.response_model_exclude_none
            assert route.response_model_by_alias
            assert not route.response_model_exclude_unset
            assert not route.response_model_exclude_defaults
            assert route.response_model_include is None and route.response_model_exclude is None


def shuffled(value: Any, rng: random.Random) -> Any:
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {k: shuffled(v, rng) for k, v in items}
    if isinstance(value, list):
        return [shuffled(v, rng) for v in value]
    return value


ADDRESS = {
    "addressLine1": "1 Road",
    "addressLine2": None,
    "city": "Valletta",
    "postCode": "VLT 1",
    "state": None,
    "country": "MT",
}
CORPORATE = {
    "id": {"type": "CORPORATE", "id": "1"},
    "profileId": "2",
    "tag": None,
    "rootUser": {
        "id": {"type": "CORPORATE", "id": "3"},
        "name": "Ann",
        "surname": "Bee",
        "email": "ann@example.com",
        "mobile": {"countryCode": "+356", "number": "79000000"},
        "companyPosition": "DIRECTOR",
        "active": True,
        "emailVerified": False,
        "mobileNumberVerified": False,
        "dateOfBirth": {"year": 1990, "month": 1, "day": 2},
        "unknown": "dropped",
    },
    "company": {
        "name": "Acme é ü 漢",
        "type": "LLC",
        "registrationNumber": None,
        "registeredAddress": ADDRESS,
        "businessAddress": {**ADDRESS, "addressLine2": "Floor 2", "state": "N"},
        "countryOfRegistration": "MT",
        "incorporatedOn": None,
    },
    "industry": "ACCOUNTING",
    "sourceOfFunds": None,
    "sourceOfFundsOther": 'quote " and \\ and \n',
    "acceptedTerms": True,
    "ipAddress": "127.0.0.1",
    "baseCurrency": "EUR",
    "feeGroup": "DEFAULT",
    "creationTimestamp": 2**53 + 1,
}


@pytest.mark.parametrize("seed", range(5))
def test_a_hand_made_answer_is_written_as_its_model_writes_it(app: Any, seed: int) -> None:
    """Keys in any order (PostgreSQL's JSON keeps no order), None fields, unknown keys."""
    from multibank.api.v3_29 import corporates, managed_accounts

    rng = random.Random(seed)
    body = shuffled(CORPORATE, rng)
    route = route_of(app, "/multi", "GET", "/corporates")
    assert corporates.CORPORATE_ANSWER.encode(body) == model_path(route, body)
    account = {
        "state": {"blockedReason": "USER", "state": "BLOCKED"},
        "balances": {"actualBalance": -1, "availableBalance": 0},
        "creationTimestamp": 1,
        "currency": "EUR",
        "friendlyName": "x",
        "tag": None if seed % 2 else "t",
        "profileId": "2",
        "id": "9",
    }
    page = {"responseCount": 2, "count": 7, "accounts": [account, shuffled(account, rng)]}
    route = route_of(app, "/multi", "GET", "/managed_accounts")
    assert managed_accounts.PAGE.encode(page) == model_path(route, page)


def test_a_model_the_plan_cannot_write_is_refused() -> None:
    class Aliased(BaseModel):
        a: int = Field(serialization_alias="b")

    class Defaulted(BaseModel):
        a: int = 1

    class Mapped(BaseModel):
        a: dict[str, Defaulted]

    for model in (Aliased, Defaulted, Mapped):
        with pytest.raises(ValueError):
            plan_of(model)
    assert answers.plan_of(BaseModel) == ()
