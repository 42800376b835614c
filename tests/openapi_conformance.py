"""Every answer the test suite gets is checked against the OpenAPI document of its base URL.

The suite calls every operation of every version with success, each documented error and each
refused caller, so together its answers are the best sample there is of what the server really
says. `Recorder` wraps the application, notes each answer (base URL, operation, status, body),
and at the end of the session `violations` lists every answer its operation's description does
not declare: an undeclared status, or a body that does not match the declared schema (or a body
where none is declared). Generated clients are built from these documents, so a violation is a
client that breaks.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from jsonschema_rs import Draft202012Validator
from starlette.routing import Mount
from starlette.types import ASGIApp, Message, Receive, Scope, Send

BASES = (
    "/multi",
    "/3.29.1/multi",
    "/3.1.0/multi",
    "/3.63.4/multi",
    "/simulate/api",
    "/portal/api",
)


@dataclass(frozen=True)
class Answer:
    base: str
    method: str
    path: str
    status: int
    content_type: str
    body: bytes
    test: str


@dataclass
class Recorder:
    app: ASGIApp
    answers: list[Answer] = field(default_factory=list)
    seen: set[tuple[str, str, str, int, str]] = field(default_factory=set)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.app, name)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 0
        content_type = ""
        body = bytearray()

        async def watch(message: Message) -> None:
            nonlocal status, content_type
            if message["type"] == "http.response.start":
                status = message["status"]
                for name, value in message.get("headers", []):
                    if name.lower() == b"content-type":
                        content_type = value.decode("latin-1")
            elif message["type"] == "http.response.body" and len(body) < 1_000_000:
                body.extend(message.get("body", b""))
            await send(message)

        await self.app(scope, receive, watch)
        route = scope.get("route")
        path = getattr(route, "path_format", None) or getattr(route, "path", None)
        base = str(scope.get("root_path", ""))
        if path is None or base not in BASES:
            return  # no operation matched (404 of an unknown path, a page outside the APIs)
        method = str(scope["method"])
        # One body per (operation, status, body shape) is enough to check.
        shape = content_type if not content_type.startswith("application/json") else _keys(body)
        key = (base, method, path, status, shape)
        if key in self.seen:
            return
        self.seen.add(key)
        test = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]
        self.answers.append(Answer(base, method, path, status, content_type, bytes(body), test))


def _keys(body: bytes) -> str:
    try:
        value = json.loads(body)
    except ValueError:
        return "?"
    if isinstance(value, dict):
        return ",".join(sorted(value)) + "|" + str(value.get("errorCode", ""))
    return type(value).__name__


def documents(app: Any) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for route in app.routes:
        if isinstance(route, Mount) and route.path in BASES:
            out[route.path] = route.app.openapi()  # type: ignore[attr-defined]
    return out


def violations(answers: list[Answer], docs: dict[str, dict[str, Any]]) -> list[str]:
    found: list[str] = []
    for a in answers:
        doc = docs[a.base]
        operation = doc["paths"].get(a.path, {}).get(a.method.lower())
        where = f"{a.method} {a.base}{a.path} -> {a.status} ({a.test})"
        if operation is None or a.status in (405, 500):
            # An operation this version lacks (it answers 404 and is not described); a method
            # the path does not serve (`PATCH /users/kyc` reaches the `/users/{user_id}`
            # route, but no operation was called); or a test that breaks the server on purpose
            # (no 500 is ever part of the contract).
            continue
        response = operation["responses"].get(str(a.status))
        if response is None:
            declared = sorted(operation["responses"])
            found.append(f"{where}: status not declared (declared: {declared})")
            continue
        content = response.get("content")
        if not content:
            if a.body:
                found.append(f"{where}: body {a.body[:200]!r} but none declared")
            continue
        media = a.content_type.split(";")[0].strip()
        if media not in content:
            if a.body or media:
                found.append(f"{where}: content-type {media!r} not declared ({sorted(content)})")
            continue
        schema = content[media].get("schema")
        if schema is None or media != "application/json":
            continue
        try:
            value = json.loads(a.body)
        except ValueError:
            found.append(f"{where}: body is not JSON: {a.body[:200]!r}")
            continue
        validator = Draft202012Validator({**schema, "components": doc.get("components", {})})
        errors = list(validator.iter_errors(value))
        if errors:
            found.append(f"{where}: {errors[0].message} at {list(errors[0].instance_path)}")
    return found
