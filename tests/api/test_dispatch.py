"""The dispatch index (api/dispatch.py, decision 0061) picks the route the router's own walk
picks: for every route of every application of the server, its template filled with sample
values and with hostile ones (another slash, one segment more or less, a parameter holding a
`/`, a percent-encoded character, a final newline, an unknown path), under every method and some
no route names. A deliberately broken index fails the same check."""

from __future__ import annotations

import re
import tempfile
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute, iter_route_contexts
from starlette.routing import BaseRoute, Match, Mount, Route, Router

from multibank.api.dispatch import RouteIndex
from multibank.app import SHORTCUT_BASES, build_container, create_app
from multibank.settings import Settings

# Reads the source, the documents or the help: the SQLite half of scripts/test runs it.
pytestmark = pytest.mark.any_database

METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "BREW")
PARAM = re.compile(r"\{([a-zA-Z_][a-zA-Z0-9_]*)(?::([a-z]+))?\}")
# What a parameter is filled with, per convertor: plain values, and hostile ones. The scope's
# path is already percent-decoded: `a/b` is what `a%2Fb` becomes, `é` what `%C3%A9` becomes.
SAMPLES = {
    None: ("abc", "a/b"),
    "str": ("abc", "a/b"),
    "int": ("42", "x"),
    "float": ("1.5", "1"),
    "uuid": (str(uuid.UUID(int=7)), "nope"),
    "path": ("a", "a/b/c", ""),
}


@pytest.fixture(scope="module")
def server() -> FastAPI:
    """The server's application as `create_app` builds it (no database is opened)."""
    settings = Settings(database_url=f"sqlite+aiosqlite:///{tempfile.mkdtemp()}/dispatch.db")
    return create_app(container=build_container(settings))


def routers(app: FastAPI) -> Iterator[tuple[str, Router]]:
    """Every router of the server with the path its application is mounted at."""
    yield "", app.router
    for route in app.routes:
        if isinstance(route, Mount) and isinstance(route.app, FastAPI):
            yield route.path, route.app.router


def filled(template: str) -> Iterator[str]:
    """`template` with each parameter filled with each sample of its convertor (one parameter
    varied at a time, the others at their first sample)."""
    params = PARAM.findall(template)
    if not params:
        yield template
        return
    for index, (_, convertor) in enumerate(params):
        for sample in SAMPLES[convertor or None]:
            values = [
                sample if i == index else SAMPLES[c or None][0] for i, (_, c) in enumerate(params)
            ]
            parts = PARAM.split(template)[:: PARAM.groups + 1]  # the text between params
            yield parts[0] + "".join(v + part for v, part in zip(values, parts[1:], strict=True))


def variants(path: str) -> Iterator[str]:
    """`path` and hostile neighbours (the parent of a template is mostly another template)."""
    yield path
    yield path + "/"
    yield path + "/extra"
    yield path + "\n"


def templates(routes: list[BaseRoute], mounted: bool = False) -> Iterator[str]:
    """The path templates of `routes`, with those of FastAPI's included routers (as they serve
    them) and, if `mounted`, of mounted applications (under their mount's path)."""
    for context in iter_route_contexts(routes):
        path = context.path
        if isinstance(path, str) and path.startswith("/"):
            yield path
            route = context.original_route
            if isinstance(route, Mount):
                yield path + "/x"
                if mounted and isinstance(route.app, FastAPI):
                    yield from (path + t for t in templates(route.app.routes))


def paths(app: FastAPI, prefix: str, router: Router) -> list[str]:
    """The paths sent to `router`: its own templates filled and varied, paths no route has and,
    for the outer router, the mounted applications' templates (their mount decides alone)."""
    found = {"/", "", "/unknown", "/unknown/path/deep", "/%", "/é x", "/" + "x" * 300}
    for template in templates(router.routes):
        fills = list(filled(template))
        found.update(fills)  # hostile parameter values
        found.update(variants(fills[0]))  # hostile neighbours of a plain one
    if not prefix:
        found.update(next(filled(t)) for t in templates(app.routes, mounted=True))
    return sorted(prefix + p for p in found)


def scopes(app: FastAPI, prefix: str, router: Router) -> Iterator[dict[str, Any]]:
    """Scopes as they reach `router`: for a mounted application, as its `Mount` makes them."""
    mount = next((r for r in app.routes if isinstance(r, Mount) and r.path == prefix), None)
    for path in paths(app, prefix, router):
        for method in METHODS:
            scope: dict[str, Any] = {"type": "http", "method": method, "path": path}
            scope["root_path"] = ""
            if mount is not None:
                match, child_scope = mount.matches(scope)
                if match is not Match.FULL:
                    continue
                scope.update(child_scope)
            yield scope


def first_full(routes: Any, scope: dict[str, Any]) -> BaseRoute | None:
    """The route the router's walk handles, when one FULL-matches (otherwise the walk answers a
    PARTIAL, a redirect or a 404, which the index always leaves to it)."""
    for route in routes:
        match, _ = route.matches(scope)
        if match is Match.FULL:
            return route
    return None


def name(route: BaseRoute | None) -> str:
    return "none" if route is None else f"{type(route).__name__} {getattr(route, 'path', '')}"


def index_of(router: Router) -> RouteIndex:
    index = router.middleware_stack
    assert isinstance(index, RouteIndex), "create_app puts an index in front of every router"
    return index


def disagreements(
    app: FastAPI, make: type[RouteIndex] = RouteIndex, only: tuple[str, ...] = ()
) -> tuple[list[str], int]:
    """Where an index made by `make` over each router of `app` (those mounted at `only`, if
    given) differs from the walk, and how many requests it handed to their route itself."""
    wrong: list[str] = []
    direct = 0
    for prefix, router in routers(app):
        if only and prefix not in only:
            continue
        index = make(router)
        for scope in scopes(app, prefix, router):
            expected = first_full(router.routes, scope)
            where = f"{scope['method']} {scope['path']!r} in {prefix or 'the server'}"
            candidates = index.candidates(scope)
            if candidates is not None and first_full(candidates, scope) is not expected:
                picked = first_full(candidates, scope)
                wrong.append(f"{where}: candidates pick {name(picked)}, the walk {name(expected)}")
            found = index.find(scope)
            if found is not None:
                direct += 1
                if found[0] is not expected:
                    wrong.append(f"{where}: handed to {name(found[0])}, the walk {name(expected)}")
            elif (
                type(index) is RouteIndex
                and isinstance(expected, APIRoute)
                and candidates is not None
                and expected in candidates
                and all(isinstance(r, APIRoute) for r in candidates[: candidates.index(expected)])
            ):
                wrong.append(f"{where}: left to the walk although {expected.path} matches")
            if wrong and only:
                return wrong, direct
    return wrong, direct


def test_the_index_picks_the_route_the_walk_picks(server: FastAPI) -> None:
    wrong, direct = disagreements(server)
    assert not wrong, "\n".join(wrong[:20])
    assert direct > 300  # the requests of every plain route, under its methods


def test_every_router_of_the_server_has_its_index(server: FastAPI) -> None:
    found = [prefix for prefix, router in routers(server) if index_of(router)]
    assert found == [
        "",
        "/multi",
        "/3.29.1/multi",
        "/3.1.0/multi",
        "/3.63.4/multi",
        "/simulate/api",
        "/portal/api",
    ]


def test_a_version_read_tries_one_route(server: FastAPI) -> None:
    """The hot read meets its own route first, not the fifty before it."""
    router = dict(routers(server))["/multi"]
    scope: dict[str, Any] = {"type": "http", "method": "GET", "path": "/multi/managed_accounts/1"}
    scope["root_path"] = "/multi"
    before = [r for r in router.routes if isinstance(r, Route)]
    route = first_full(router.routes, scope)
    assert isinstance(route, APIRoute) and route.path == "/managed_accounts/{id}"
    assert before.index(route) > 20
    candidates = index_of(router).candidates(scope)
    assert candidates is not None and candidates[0] is route


def test_no_outer_route_before_a_shortcut_mount_can_match_under_it(server: FastAPI) -> None:
    """`VersionShortcut` hands a path under a base URL to its mount at once, before the outer
    walk: the walk would pick that mount too, since every outer route before it (and every
    route of an included router among them) has a literal first segment other than the
    base's, so cannot match a path under the base."""
    for base in SHORTCUT_BASES:
        at = next(i for i, r in enumerate(server.routes) if isinstance(r, Mount) and r.path == base)
        first = base.split("/")[1]
        for context in iter_route_contexts(server.routes[:at]):
            path = context.path
            assert isinstance(path, str) and path.startswith("/"), path
            segment = path.split("/", 2)[1]
            assert "{" not in segment and segment != first, (base, path)
        for template in templates(server.routes[at].app.routes):  # type: ignore[attr-defined]
            scope: dict[str, Any] = {"type": "http", "method": "GET", "root_path": ""}
            scope["path"] = base + next(filled(template))
            assert first_full(server.routes, scope) is server.routes[at]


class Reversed(RouteIndex):
    def candidates(self, scope: dict[str, Any]) -> tuple[BaseRoute, ...] | None:
        found = super().candidates(scope)
        return None if found is None else found[::-1]


class WithoutWildcards(RouteIndex):
    def candidates(self, scope: dict[str, Any]) -> tuple[BaseRoute, ...] | None:
        found = super().candidates(scope)
        plain = {id(route) for route, shape in self.shapes if not shape.wildcard}
        return None if found is None else tuple(r for r in found if id(r) in plain)


class GetForEveryMethod(RouteIndex):
    def candidates(self, scope: dict[str, Any]) -> tuple[BaseRoute, ...] | None:
        return super().candidates({**scope, "method": "GET"})


@pytest.mark.parametrize("broken", [Reversed, WithoutWildcards, GetForEveryMethod])
def test_a_broken_index_is_caught(server: FastAPI, broken: type[RouteIndex]) -> None:
    wrong, _ = disagreements(server, broken, only=("", "/multi", "/simulate/api"))
    assert wrong
