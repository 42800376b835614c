"""A dispatch index in front of a router's walk (issue 40 §2, decision 0061).

Starlette's router (and FastAPI's, which keeps its walk) tries every route in order with
`route.matches(scope)` and handles the first FULL match. A version application holds about a
hundred routes, so its hot reads were found after half of them. `RouteIndex` tries only the
routes that can FULL-match the request, kept in their original order, and otherwise leaves the
request to the router's own walk:

- a `Route` whose parameters use only Starlette's `str`, `int`, `float` and `uuid` convertors
  (none of which matches a `/`) matches a path with exactly as many `/` as its template, whose
  first segment is the template's first segment when that segment has no parameter; and it only
  FULL-matches a method among its `methods` (any other method is at most a PARTIAL match);
- a `Mount` under a literal first segment matches only paths starting with that segment;
- anything else (a `{x:path}` parameter, a `Mount` at a parameter, `Host`, a FastAPI included
  router, a websocket route) may match anything: it is a candidate for every request.

So the first FULL match among the candidates is the first FULL match among all the routes: each
route left out cannot FULL-match. That route is handled as the router's walk handles it (the
router in the scope, the match's child scope, then `route.handle`) when it is a FastAPI
`APIRoute` whose match carries only what a plain match carries; in every other case (no FULL
match: a 405, a 404, a redirect to the other slash form; a candidate of any other kind before
the match) the router's own walk runs, which decides exactly as it did without the index.
`tests/api/test_dispatch.py` proves the equivalence over every route of the server.

Only public names of Starlette and FastAPI are used: `Router.routes`, `Router.app`,
`Router.middleware_stack`, `BaseRoute.matches`/`handle`, `Route.path`, `Route.methods`,
`Route.param_convertors`, `Mount.path`, `Match`, the convertor classes.
"""

from __future__ import annotations

from collections.abc import Sequence

from fastapi.routing import APIRoute
from starlette.convertors import FloatConvertor, IntegerConvertor, StringConvertor, UUIDConvertor
from starlette.routing import BaseRoute, Match, Mount, Route, Router
from starlette.types import ASGIApp, Receive, Scope, Send

# Convertors whose regex cannot match a `/`: a parameter stays within its path segment.
SEGMENT_CONVERTORS = (StringConvertor, IntegerConvertor, FloatConvertor, UUIDConvertor)
# What a plain `APIRoute.matches` puts in its child scope; anything more (FastAPI's included
# routers carry their own context) is left to the router's walk, which knows how to merge it.
PLAIN_MATCH = frozenset({"endpoint", "path_params", "route"})

Key = tuple[str | None, int, str | None]


class Shape:
    """What a route's template says of the paths and methods it can FULL-match."""

    __slots__ = ("first", "methods", "segments", "wildcard")

    def __init__(self, route: BaseRoute) -> None:
        self.wildcard = True
        self.segments = -1  # the number of `/` in a matching path; -1: any
        self.first: str | None = None  # the literal first segment a match has; None: any
        self.methods: frozenset[str] | None = None  # None: any
        if isinstance(route, Route) and route.path.startswith("/"):
            if all(type(c) in SEGMENT_CONVERTORS for c in route.param_convertors.values()):
                self.wildcard = False
                self.segments = route.path.count("/")
                self.first = literal(route.path.split("/", 2)[1])
                self.methods = frozenset(route.methods) if route.methods else None
        elif isinstance(route, Mount) and route.path.startswith("/"):
            # `Mount("/a/b")` matches `/a/b/...` only; its methods are its application's.
            self.first = literal(route.path.split("/", 2)[1])

    def may_match(self, key: Key) -> bool:
        """False only when no request of this key can FULL-match the route."""
        method, segments, first = key
        if self.methods is not None and method not in self.methods:
            return False
        if self.segments >= 0 and segments != self.segments:
            return False
        return self.first is None or first == self.first


def literal(segment: str) -> str | None:
    return None if "{" in segment else segment


def route_path(scope: Scope) -> str:
    """The path the routes match: the scope's path without its `root_path` (what Starlette's
    routes match, as its documented `root_path` handling for mounted applications does)."""
    path: str = scope["path"]
    root_path: str = scope.get("root_path", "")
    if not root_path or not path.startswith(root_path):
        return path
    if path == root_path:
        return ""
    if path[len(root_path)] == "/":
        return path[len(root_path) :]
    return path


class RouteIndex:
    """The ASGI application of `router` (its `middleware_stack`), trying its candidates first.

    The index is built from `router.routes` at the first request and again whenever the number
    of routes changes (routes are appended after an application is made); a route replaced in
    place without changing their number is not seen, which the server never does."""

    def __init__(self, router: Router) -> None:
        self.router = router
        self.walk: ASGIApp = router.app
        self.count = -1
        self.shapes: list[tuple[BaseRoute, Shape]] = []
        self.methods: frozenset[str] = frozenset()
        self.firsts: frozenset[str] = frozenset()
        self.longest = 0
        self.lists: dict[Key, tuple[BaseRoute, ...]] = {}

    def build(self, routes: Sequence[BaseRoute]) -> None:
        self.shapes = [(route, Shape(route)) for route in routes]
        self.methods = frozenset(m for _, s in self.shapes for m in s.methods or ())
        self.firsts = frozenset(s.first for _, s in self.shapes if s.first is not None)
        self.longest = max((s.segments for _, s in self.shapes), default=0)
        self.lists = {}
        self.count = len(routes)

    def key(self, method: str, path: str) -> Key:
        """The request's key, folded so that there are few: a method no route names, a first
        segment no template has, and more segments than any template has each stand for all
        their kind (no route is told apart by them)."""
        first = path.split("/", 2)[1] if path.startswith("/") else ""
        return (
            method if method in self.methods else None,
            min(path.count("/"), self.longest + 1),
            first if first in self.firsts else None,
        )

    def candidates(self, scope: Scope) -> tuple[BaseRoute, ...] | None:
        """The routes that may FULL-match this request, in order; None: the router decides."""
        routes = self.router.routes
        if len(routes) != self.count:
            self.build(routes)
        path = route_path(scope)
        if path.endswith("\n"):
            # A regex's `$` also matches before a final newline: a template's last segment can
            # then match a path whose segment ends in one, which the key would not group with it.
            return None
        key = self.key(scope["method"], path)
        found = self.lists.get(key)
        if found is None:
            found = tuple(route for route, shape in self.shapes if shape.may_match(key))
            self.lists[key] = found
        return found

    def find(self, scope: Scope) -> tuple[APIRoute, Scope] | None:
        """The route the router's walk would handle and its child scope, when this index can
        hand the request to it as the walk would; None when the walk is to decide."""
        candidates = self.candidates(scope)
        if candidates is None:
            return None
        for route in candidates:
            if not isinstance(route, APIRoute):
                # A mount or an included router (or a route of another kind) is handled by the
                # walk, which would try again every candidate before it: stop here instead.
                return None
            match, child_scope = route.matches(scope)
            if match is Match.FULL:
                return (route, child_scope) if child_scope.keys() <= PLAIN_MATCH else None
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # With FastAPI's telemetry on, its walk records the route it chose: leave it that.
        if scope["type"] == "http" and "fastapi.telemetry" not in scope:
            found = self.find(scope)
            if found is not None:
                route, child_scope = found
                if "router" not in scope:
                    scope["router"] = self.router
                scope.update(child_scope)
                await route.handle(scope, receive, send)
                return
        await self.walk(scope, receive, send)


def install(router: Router) -> RouteIndex:
    """Puts a `RouteIndex` in front of `router`'s walk, inside whatever wraps the router (the
    application's exception handlers and middleware). The router must have no middleware of its
    own (its `middleware_stack` is its walk) and, for a FastAPI router, no form limits, which its
    walk sets in the scope before matching."""
    if router.middleware_stack != router.app:
        raise ValueError("the router has middleware of its own: the index would skip it")
    if getattr(router, "form_limits", None):
        raise ValueError("the router sets form limits in its walk: the index would skip them")
    index = RouteIndex(router)
    router.middleware_stack = index
    return index
