"""One request scope, one dependency (issue 40 §1, decision 0063).

- Every operation of the server is a `UnitOfWorkRoute` (its routers are `UnitOfWorkRouter`s):
  none goes without its `RequestScope` and transaction.
- The credentials are read from the request's headers by the caller's dependency, and the OpenAPI
  documents say what they said when FastAPI's security schemes were solved as dependencies:
  `openapi_security_d90f356.json` holds, for each base URL, the security schemes and each
  operation's security, statuses and parameters as served at d90f356, before the change.
- A request's session is made when a statement first needs it: a request refused before that
  makes none, and a request makes at most one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.routing import BaseRoute, Mount
from starlette.types import Receive, Scope, Send

from multibank.api.openapi import declared_schemes
from multibank.api.routing import UnitOfWorkRoute, UnitOfWorkRouter
from multibank.api.scope import SCOPE_KEY, RequestScope
from multibank.app import create_app
from multibank.container import Container
from tests.conftest import ProgrammeFactory
from tests.factories import verified
from tests.openapi_conformance import BASES

BEFORE = json.loads((Path(__file__).parent / "openapi_security_d90f356.json").read_text())

# The routes that are not operations of the APIs: the server's probes and metrics, and the docs
# pages, redirects and descriptions of each application. None reads the database per request
# through a session (`/readyz` pings the writer's pool).
NOT_UNITS_OF_WORK = {
    "/healthz",
    "/readyz",
    "/metrics",
    "/docs",
    "/redoc",
    "/",
    "/portal",
    *BASES,
}


def api_routes(routes: list[BaseRoute], prefix: str = "") -> Iterator[tuple[str, APIRoute]]:
    for route in routes:
        if isinstance(route, Mount):
            inner = getattr(route.app, "routes", None)
            if inner is not None:
                yield from api_routes(inner, prefix + route.path)
        elif isinstance(route, APIRoute):
            yield prefix, route


@pytest.mark.any_database  # its own SQLite file, or no database at all
def test_every_operation_is_a_unit_of_work(container: Container) -> None:
    app = create_app(container=container)
    found = list(api_routes(app.routes))
    assert len(found) > 300
    others = sorted(
        f"{prefix}{route.path}"
        for prefix, route in found
        if not isinstance(route, UnitOfWorkRoute) and route.path not in NOT_UNITS_OF_WORK
    )
    assert others == []
    units = [route for _, route in found if isinstance(route, UnitOfWorkRoute)]
    assert all(not r.path.startswith(("/docs", "/redoc")) for r in units)


@pytest.mark.any_database  # its own SQLite file, or no database at all
def test_a_router_cannot_forget_the_route_class() -> None:
    assert UnitOfWorkRouter().route_class is UnitOfWorkRoute
    with pytest.raises(TypeError):
        UnitOfWorkRouter(route_class=APIRoute)


def served(app: FastAPI) -> dict[str, FastAPI]:
    return {r.path: r.app for r in app.routes if isinstance(r, Mount) and r.path in BASES}


LINE_FILTERS = ("executedFrom", "executedTo")


@pytest.mark.any_database  # its own SQLite file, or no database at all
def test_the_documents_declare_security_as_before(container: Container) -> None:
    """Each operation served at d90f356 is described as it was there: the same security
    requirement, statuses (the 400/401/403 of the credentials' checks) and parameters (the
    credentials are no parameters); each base URL declares the same security schemes."""
    apps = served(create_app(container=container))
    # The 3.63 line's base came later (issue 43): it serves 3.29.1's operations as they are
    # (D35), so it is held to what `/multi` declared, but for the spend rules `PUT` it lacks.
    assert set(apps) == {*BEFORE, "/3.63.4/multi"}
    for base, before in {**BEFORE, "/3.63.4/multi": BEFORE["/multi"]}.items():
        doc = apps[base].openapi()
        assert doc["components"].get("securitySchemes") == before["securitySchemes"], base
        for key, was in before["operations"].items():
            method, path = key.split(" ", 1)
            if base == "/3.63.4/multi" and key == "PUT /managed_cards/{id}/spend_rules":
                assert method.lower() not in doc["paths"][path]
                continue
            operation = doc["paths"][path][method.lower()]
            # A business rule's 409 added since (a destroyed card's spend rules, issue 41) is no
            # credentials' check: left out of both sides.
            now = {
                "security": operation.get("security"),
                "responses": sorted(s for s in operation["responses"] if s != "409"),
                "parameters": [[p["in"], p["name"]] for p in operation.get("parameters", [])],
            }
            if base == "/3.63.4/multi":
                # The line's own filters of its payment lists (D40): no credentials either.
                now["parameters"] = [p for p in now["parameters"] if p[1] not in LINE_FILTERS]
            was = {**was, "responses": [s for s in was["responses"] if s != "409"]}
            assert now == was, f"{base} {key}"


@pytest.mark.any_database  # its own SQLite file, or no database at all
def test_each_operation_declares_what_its_dependencies_read(container: Container) -> None:
    """The security requirement of every operation (those added since d90f356 too) names the
    schemes its dependencies read, all in one requirement object, unless the route lists its
    alternatives itself."""
    apps = served(create_app(container=container))
    checked = 0
    for base, app in apps.items():
        doc = app.openapi()
        for _, route in api_routes(app.routes):
            if not route.include_in_schema:
                continue
            for method in route.methods or ():
                operation = doc["paths"][route.path_format][method.lower()]
                alternatives = (route.openapi_extra or {}).get("x-security-alternatives")
                schemes = declared_schemes(route)
                if alternatives is not None:
                    assert operation["security"] == alternatives
                elif schemes:
                    expected = [{s.scheme_name: [] for s in schemes}]
                    assert operation["security"] == expected, f"{base} {route.path}"
                    checked += 1
    assert checked > 200


class Scopes:
    """The application, remembering the `RequestScope` of each request it answers."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.seen: list[RequestScope] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.app(scope, receive, send)
        finally:
            if SCOPE_KEY in scope:
                self.seen.append(scope[SCOPE_KEY])


@pytest.fixture
async def counted(app: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A client whose requests' scopes are kept, and the sessions the scopes made (True: of
    the read engine)."""
    made: list[bool] = []
    make = RequestScope.session.fget
    assert make is not None

    def counting(scope: RequestScope) -> Any:
        if scope.opened is None:
            made.append(scope.read_only)
        return make(scope)

    monkeypatch.setattr(RequestScope, "session", property(counting))
    scopes = Scopes(app)
    transport = httpx.ASGITransport(app=scopes, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
        yield c, scopes, made


async def test_a_session_only_when_a_statement_needs_one(
    client: httpx.AsyncClient, programme: ProgrammeFactory, counted: Any
) -> None:
    p = await programme()
    ident = await verified(client, p)
    assert (await client.get("/multi/corporates", headers=ident.headers)).status_code == 200
    c, scopes, made = counted
    made.clear()  # the sign-up's

    # Refused before any statement: no key, a bad token of a known key.
    assert (await c.get("/multi/corporates")).status_code == 400
    bad = {**p.headers, "authorization": "Bearer nope"}
    assert (await c.get("/multi/corporates", headers=bad)).status_code == 401
    assert (await c.post("/multi/managed_accounts", headers=bad, json={})).status_code == 401
    assert [s.opened for s in scopes.seen] == [None, None, None]
    assert made == []

    # A read: one session, of the read engine; a write: one, of the writer's.
    assert (await c.get("/multi/corporates", headers=ident.headers)).status_code == 200
    assert made == [True]
    body = {
        "profileId": p.profiles["corporateManagedAccount"],
        "friendlyName": "Scoped",
        "currency": "EUR",
    }
    r = await c.post("/multi/managed_accounts", headers=ident.headers, json=body)
    assert r.status_code == 200, r.text
    assert made == [True, False]
    assert all(s.opened is not None for s in scopes.seen[3:])


async def test_the_caller_is_read_from_the_headers(
    client: httpx.AsyncClient, programme: ProgrammeFactory
) -> None:
    """The scheme of `Authorization` in any case, and a header without a token refused as
    `HTTPBearer` refuses it: what the security dependencies accepted, and nothing more."""
    p = await programme()
    ident = await verified(client, p)
    token = ident.token
    for value, status in (
        (f"bearer {token}", 200),
        (f"BEARER   {token}  ", 200),
        ("Bearer", 401),
        ("Bearer ", 401),
        (f"Basic {token}", 401),
        (token, 401),
    ):
        headers = {"api-key": p.api_key, "authorization": value}
        r = await client.get("/multi/corporates", headers=headers)
        assert r.status_code == status, value
    r = await client.get("/multi/corporates", headers={"api-key": "", "authorization": token})
    assert r.status_code == 400
