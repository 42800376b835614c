"""Outermost ASGI layer: request-ref, the 1 MiB body limit, metrics, access logs, last 500."""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any

from starlette.routing import Match, Mount
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from multibank.api.errors import database_unavailable, logged
from multibank.container import Container
from multibank.kernel import conflicts
from multibank.observability import REQUEST_LATENCY, REQUESTS, request_ref_var

log = logging.getLogger("multibank.access")

# The APIs whose answers are a customer's or an operator's: never cached (issue 10).
PRIVATE_PREFIXES = (
    "/multi/",
    "/3.29.1/multi/",
    "/3.1.0/multi/",
    "/3.63.4/multi/",
    "/portal/",
    "/simulate/",
)


def _route_template(scope: Scope) -> str:
    route = scope.get("route")
    path = getattr(route, "path", None)
    if path is None:
        return "unmatched"
    return f"{scope.get('root_path', '')}{path}"


UNAVAILABLE = {"code": "SERVICE_UNAVAILABLE", "message": "The database is unavailable; retry."}


def refuse_framing(headers: list[tuple[bytes, bytes]]) -> None:
    """Every HTML page (the API and simulator docs, the KYC sandbox page, the landing page, the
    portal) refuses to be framed, as the portal does: no other site can overlay its buttons.
    A page's own policy stays; what it lacks is added."""
    names = {k.lower(): v for k, v in headers}
    if not names.get(b"content-type", b"").lower().startswith(b"text/html"):
        return
    if b"x-frame-options" not in names:
        headers.append((b"x-frame-options", b"DENY"))
    policies = [v.lower() for k, v in headers if k.lower() == b"content-security-policy"]
    if not any(b"frame-ancestors" in policy for policy in policies):
        # A second policy is enforced beside the first: this one restricts framing only.
        headers.append((b"content-security-policy", b"frame-ancestors 'none'"))


class EdgeMiddleware:
    def __init__(self, app: ASGIApp, container: Container) -> None:
        self.app = app
        self.container = container
        self.max_body = container.settings.max_body_bytes

    @staticmethod
    async def _unavailable(scope: Scope, send: Send, error: Exception, sent: bool) -> None:
        """A route of the outer application (no handler of a version's) met the outage: the
        same one WARNING line and, unless its answer had begun, the same 503."""
        log.warning("database unavailable on %s %s: %s", scope["method"], scope["path"], error)
        if not sent:
            await _send_json(send, 503, UNAVAILABLE, ((b"retry-after", b"5"),))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                scope["multibank"] = self.container
            await self.app(scope, receive, send)
            return
        scope["multibank"] = self.container
        no_store = str(scope.get("path", "")).startswith(PRIVATE_PREFIXES)
        ref = os.urandom(16).hex()  # 128 random bits, as a uuid4's hex without its version bits
        token = request_ref_var.set(ref)
        started = time.perf_counter()
        status: dict[str, Any] = {"code": 500, "sent": False, "too_large": False}

        async def send_wrapper(message: Message) -> None:
            if status["too_large"] and message.get("type", "").startswith("http.response"):
                return  # the 413 has been answered; whatever the app says after it is dropped
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
                status["sent"] = True
                headers = [
                    (k, v)
                    for k, v in message.get("headers", [])
                    if k.lower() not in (b"server", b"x-content-type-options")
                ]
                headers.append((b"request-ref", ref.encode()))
                headers.append((b"x-content-type-options", b"nosniff"))  # once, whoever set it
                refuse_framing(headers)
                if no_store and not any(k.lower() == b"cache-control" for k, _ in headers):
                    # Answers carry personal data and tokens: no cache keeps them.
                    headers.append((b"cache-control", b"no-store"))
                message = {**message, "headers": headers}
            await send(message)

        try:
            if await self._refused(scope, send_wrapper):
                return
            received = 0

            async def receive_limited() -> Message:
                nonlocal received
                message = await receive()
                if message["type"] == "http.request":
                    received += len(message.get("body", b""))
                    if received > self.max_body and not status["sent"]:
                        # Answer 413 now and tell the app the client went away, so it stops
                        # reading; frameworks would turn an exception here into a 400.
                        await _send_json(send_wrapper, 413, {"message": "Request entity too large"})
                        status["too_large"] = True
                        return {"type": "http.disconnect"}
                return message

            try:
                await self.app(scope, receive_limited, send_wrapper)
            except Exception as error:
                if status["too_large"]:
                    return  # the app noticed the "disconnect" we made up; 413 already went out
                if logged(error):
                    # A mounted application's handler answered it and logged it (an outage's
                    # 503 in one WARNING line); it still comes up through the mount. Logged
                    # again here, with a traceback, each outage request would be said twice,
                    # once as an ERROR.
                    return
                if database_unavailable(error) or conflicts.lost_race(error):
                    # Expected weather in a route of the outer application: one WARNING line.
                    await self._unavailable(scope, send_wrapper, error, status["sent"])
                    return
                log.exception("unhandled error")
                if not status["sent"]:
                    await _send_json(
                        send_wrapper, 500, {"code": "INTERNAL_ERROR", "message": "Internal error"}
                    )
        finally:
            _observe(scope, ref, status["code"], time.perf_counter() - started)
            request_ref_var.reset(token)

    async def _refused(self, scope: Scope, send: Send) -> bool:
        """Answered before the application sees it: a NUL in the path or query (PostgreSQL
        cannot store one and SQLite would: refused alike, 400), or a declared body over the
        limit (413)."""
        if "\x00" in scope["path"] or b"%00" in scope.get("query_string", b""):
            await _send_json(
                send,
                400,
                {
                    "message": "The path or query must not contain a NUL character.",
                    "syntaxErrors": {
                        "invalidFields": [{"fieldName": "path", "error": "REGEX", "params": []}]
                    },
                },
            )
            return True
        declared = _content_length(scope)
        if declared is not None and declared > self.max_body:
            await _send_json(send, 413, {"message": "Request entity too large"})
            return True
        return False


def _observe(scope: Scope, ref: str, status: int, elapsed: float) -> None:
    """The request's metrics and, at INFO, its log line."""
    route = _route_template(scope)
    counter, latency = _metrics(scope["method"], route, status)
    counter.inc()
    latency.observe(elapsed)
    if log.isEnabledFor(logging.INFO):  # the record's fields cost even when dropped
        log.info(
            "request",
            extra={
                "request_ref": ref,
                "method": scope["method"],
                "path": scope["path"],
                "route": route,
                "status": status,
                "duration_ms": round(elapsed * 1000, 2),
            },
        )


_CHILDREN: dict[tuple[str, str, int], tuple[Any, Any]] = {}


def _metrics(method: str, route: str, status: int) -> tuple[Any, Any]:
    """The request counter and latency histogram of one method, route and status, found once:
    the client library's `labels()` validates and locks on every call."""
    key = (method, route, status)
    found = _CHILDREN.get(key)
    if found is None:
        found = (REQUESTS.labels(method, route, str(status)), REQUEST_LATENCY.labels(method, route))
        if len(_CHILDREN) < 10_000:  # methods come from clients: bounded
            _CHILDREN[key] = found
    return found


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _send_json(
    send: Send, status: int, body: dict[str, Any], extra: tuple[tuple[bytes, bytes], ...] = ()
) -> None:
    raw = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(raw)).encode()),
                *extra,
            ],
        }
    )
    await send({"type": "http.response.body", "body": raw})


class VersionShortcut:
    """Hands a request for a base URL (`/multi/...`, `/3.1.0/multi/...`, `/simulate/api/...`,
    `/portal/api/...`) straight to that base's mounted application, as the outer router's
    `Mount` would after the outer application's exception middleware and its walk over the
    server's routes: with the mounts' own public `matches` and `handle`. Only for mounts that no
    earlier outer route can match a path of (tests/api/test_dispatch.py): the walk would pick
    the same mount. Everything else, and every path a base's mount does not match, goes through
    the outer application.

    Innermost of the outer application's middleware: what wraps it (the edge, CORS) still sees
    every request."""

    def __init__(self, app: ASGIApp, mounts: list[Mount]) -> None:
        self.app = app
        self.mounts = mounts
        self.prefixes = tuple(f"{mount.path}/" for mount in mounts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and str(scope["path"]).startswith(self.prefixes):
            for mount in self.mounts:
                match, child_scope = mount.matches(scope)
                if match == Match.FULL:
                    scope.update(child_scope)
                    await mount.handle(scope, receive, send)
                    return
        await self.app(scope, receive, send)
