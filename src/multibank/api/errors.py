"""The error bodies of contract §2, installed on every application the server mounts."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import iter_route_contexts
from pydantic import BaseModel
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as SQLAlchemyTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from multibank.api.routing import ABSENT
from multibank.kernel import conflicts
from multibank.kernel.errors import DomainError
from multibank.kernel.idempotency import Replay

log = logging.getLogger("multibank.errors")

# pydantic error type -> contract `error` enum value.
_ERROR_KIND = {
    "missing": "REQUIRED",
    "string_too_short": "SIZE",
    "string_too_long": "SIZE",
    "too_short": "SIZE",
    "too_long": "SIZE",
    "string_pattern_mismatch": "REGEX",
    "value_error": "REGEX",
    "enum": "IN",
    "literal_error": "IN",
    "greater_than_equal": "AT_LEAST",
    "greater_than": "AT_LEAST",
    "less_than_equal": "AT_MOST",
    "less_than": "AT_MOST",
    "extra_forbidden": "NOT_IN",
    "set_type": "IN",
    # Ours (payments/schemas.py): the fields of exactly one of two groups.
    "one_scheme": "EXACTLY",
}


def _field_name(loc: Sequence[Any]) -> str:
    """The field as the reference names it: `cancellations[0].cancellationReason` (an item of
    a list by its index in brackets, as its validation messages write it)."""
    parts = list(loc)
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:]
    name = ""
    for part in parts:
        if isinstance(part, int):
            name += f"[{part}]"
        else:
            name += f".{part}" if name else str(part)
    return name or "body"


def _params(err: dict[str, Any]) -> list[str]:
    ctx = err.get("ctx") or {}
    kind = err["type"]
    if kind in ("string_too_short", "string_too_long", "too_short", "too_long"):
        lo = ctx.get("min_length", 0)
        hi = ctx.get("max_length", "")
        return [str(lo), str(hi)]
    if kind == "string_pattern_mismatch":
        return [str(ctx.get("pattern", ""))]
    if kind in ("enum", "literal_error"):
        expected = str(ctx.get("expected", ""))
        return [v.strip().strip("'") for v in expected.replace(" or ", ",").split(",") if v.strip()]
    for key in ("ge", "gt", "le", "lt", "exactly"):
        if key in ctx:
            return [str(ctx[key])]
    return []


def _describe(kind: str, params: list[str], msg: str) -> str:
    if kind == "SIZE" and len(params) == 2:
        return f"size must be between {params[0]} and {params[1]}"
    if kind == "REGEX" and params:
        return f'must match "{params[0]}"'
    if kind == "REQUIRED":
        return "must not be null"
    return msg


def _unwrap(annotation: Any) -> tuple[Any, list[Any]]:
    """The core type under Optional/Annotated, with the Annotated metadata met on the way."""
    metadata: list[Any] = []
    while True:
        if get_origin(annotation) is Annotated:
            metadata.extend(annotation.__metadata__)
            annotation = get_args(annotation)[0]
            continue
        args = [a for a in get_args(annotation) if a is not type(None)]
        if get_origin(annotation) in (Union, UnionType) and len(args) == 1:
            annotation = args[0]
            continue
        return annotation, metadata


def _length_bounds(request: Request | None, loc: Sequence[Any]) -> tuple[int, int | None] | None:
    """A body field's declared (min, max) length, found by walking the route's body model along
    the error's location, so a SIZE error can name both bounds as the reference does."""
    if request is None or not loc or loc[0] != "body":
        return None
    body_field = getattr(request.scope.get("route"), "body_field", None)
    annotation: Any = getattr(getattr(body_field, "field_info", None), "annotation", None)
    metadata: list[Any] = []
    for part in loc[1:]:
        annotation, _ = _unwrap(annotation)
        if isinstance(part, int) and get_origin(annotation) is list:
            annotation, metadata = get_args(annotation)[0], []
            continue
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return None
        field = annotation.model_fields.get(str(part))
        if field is None:
            return None
        annotation, metadata = field.annotation, list(field.metadata)
    _, more = _unwrap(annotation)
    low: int | None = None
    high: int | None = None
    for item in [*metadata, *more]:
        low = getattr(item, "min_length", None) if getattr(item, "min_length", None) else low
        high = getattr(item, "max_length", None) if getattr(item, "max_length", None) else high
    return (low or 0, high) if low is not None or high is not None else None


def _duplicate_key_body(name: str) -> dict[str, Any]:
    """A malformed body's 400, naming the key it repeats (D11b). The name is the client's:
    shortened, and with anything UTF-8 cannot carry (a lone surrogate) escaped."""
    if len(name) > 100:
        name = name[:100] + "…"
    name = name.encode("utf-8", "backslashreplace").decode("utf-8")
    return {
        "message": f"Malformed JSON request body: the key {name} appears more than once.",
        "syntaxErrors": {
            "invalidFields": [{"fieldName": name, "error": "EXACTLY", "params": ["1"]}]
        },
    }


def validation_body(errors: Sequence[Any], request: Request | None = None) -> dict[str, Any]:
    fields: list[dict[str, Any]] = []
    messages: list[str] = []
    for err in errors:
        if err["type"] == "json_invalid":
            return {"message": "Malformed JSON request body."}
        if err["type"] == "json_duplicate_key":  # api/jsonbody.py
            return _duplicate_key_body(_field_name(err.get("loc", ())))
        kind = _ERROR_KIND.get(err["type"], "REGEX")
        name = _field_name(err.get("loc", ()))
        params = _params(err)
        if kind == "SIZE":
            bounds = _length_bounds(request, err.get("loc", ()))
            if bounds is not None:
                params = [str(bounds[0]), "" if bounds[1] is None else str(bounds[1])]
        fields.append({"fieldName": name, "error": kind, "params": params})
        messages.append(f"request.{name}: {_describe(kind, params, err.get('msg', 'invalid'))}")
    return {
        "message": "; ".join(messages)[:255],
        "syntaxErrors": {"invalidFields": fields},
    }


def _json(status: int, body: Any, headers: dict[str, str] | None = None) -> Response:
    if body is None:
        return Response(status_code=status, headers=headers)
    return JSONResponse(body, status_code=status, headers=headers)


async def _domain(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, DomainError)
    return _json(exc.status_code, exc.body(), exc.headers())


async def _validation(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    if any(err.get("loc", ("",))[0] == "path" for err in exc.errors()):
        # `PATCH /users/kyc` reaches `PATCH /users/{user_id}` with the id "kyc"; but /users/kyc
        # is a resource of its own (POST only), so the method is what is wrong there.
        literal = _allowed_methods(request, literal_only=True)
        if literal and request.method not in literal:
            body = {"code": "METHOD_NOT_ALLOWED", "message": "Method Not Allowed"}
            return JSONResponse(body, status_code=405, headers={"Allow": ", ".join(literal)})
    return JSONResponse(validation_body(exc.errors(), request), status_code=400)


async def _http(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    codes = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED", 401: "UNAUTHORIZED", 400: "BAD_REQUEST"}
    if exc.status_code in (401, 403, 423, 429):
        return Response(status_code=exc.status_code, headers=exc.headers)
    status, detail, headers = exc.status_code, str(exc.detail), dict(exc.headers or {})
    if status == 404 and "//" in str(request.scope.get("path", "")):
        # The reference answers 405 when an id segment is empty (`/managed_accounts//block`).
        status, detail = 405, "Method Not Allowed"
    elif status == 405:
        # The router names only the first route whose path matched; RFC 9110 wants every
        # method the resource supports.
        allowed = _allowed_methods(request)
        if allowed:
            headers["Allow"] = ", ".join(allowed)
        else:  # only an operation this version lacks has this path
            status, detail, headers = 404, ABSENT, {}
    body = {"code": codes.get(status, str(status)), "message": detail}
    return JSONResponse(body, status_code=status, headers=headers)


def _allowed_methods(request: Request, literal_only: bool = False) -> list[str]:
    """The methods served at the request's path. A path written out in full (`/users/kyc`)
    is its own resource, whatever a template (`/users/{user_id}`) would also match."""
    literal: set[str] = set()
    templated: set[str] = set()
    for context in iter_route_contexts(request.app.routes):
        route = context.original_route
        if str(getattr(route, "operation_id", "") or "").startswith("absent_"):
            continue  # an operation this version lacks: it answers 404 whatever the method
        match, _ = context.matches(request.scope)
        if match != Match.NONE:
            methods = set(getattr(context, "methods", None) or ())
            path = str(getattr(context, "path", ""))
            (templated if "{" in path else literal).update(methods)
    if literal or literal_only:
        return sorted(literal)
    return sorted(templated)


async def _replay(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, Replay)
    s = exc.stored
    return Response(content=s.body, status_code=s.status_code, media_type=s.content_type)


def database_unavailable(exc: BaseException) -> bool:
    """The database cannot be reached, refuses more connections, or no pooled connection came
    free in time: the request may succeed later, so it is a 503, not a 500."""
    if isinstance(exc, (SQLAlchemyTimeoutError, OSError, ConnectionError)):
        return True
    if isinstance(exc, DBAPIError):
        if exc.connection_invalidated:
            return True
        orig = exc.orig
        name = type(orig).__name__ if orig is not None else ""
        text = str(orig or exc).lower()
        return isinstance(orig, (OSError, ConnectionError)) or any(
            marker in name or marker in text
            for marker in (
                "TooManyConnections",
                "CannotConnectNow",
                "ConnectionDoesNotExist",
                "too many clients",
                "connection refused",
                "database is locked",
            )
        )
    return False


# Noted on an exception this module's handler has answered and logged: the handler's
# application re-raises it (Starlette's ServerErrorMiddleware does), and the edge middleware,
# seeing the note, does not log it a second time (api/middleware.py).
LOGGED = "multibank: answered and logged by api/errors.py"


def logged(exc: BaseException) -> bool:
    return LOGGED in getattr(exc, "__notes__", ())


async def _unexpected(request: Request, exc: Exception) -> Response:
    exc.add_note(LOGGED)
    if conflicts.lost_race(exc):
        # Still losing after its runs (api/routing.py), or a read's: nothing was kept, and the
        # same request a moment later normally succeeds.
        log.warning("%s %s lost a race in the database: %s", request.method, request.url.path, exc)
        body = {
            "code": "SERVICE_UNAVAILABLE",
            "message": "Concurrent requests held what this one needed; nothing changed, retry.",
        }
        headers = {"Retry-After": str(conflicts.RETRY_AFTER_SECONDS)}
        return JSONResponse(body, status_code=503, headers=headers)
    if database_unavailable(exc):
        log.warning("database unavailable on %s %s: %s", request.method, request.url.path, exc)
        body = {"code": "SERVICE_UNAVAILABLE", "message": "The database is unavailable; retry."}
        return JSONResponse(body, status_code=503, headers={"Retry-After": "5"})
    # The client learns nothing of the failure but the request-ref that finds it in the logs.
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return JSONResponse({"code": "INTERNAL_ERROR", "message": "Internal error"}, status_code=500)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(DomainError, _domain)
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(StarletteHTTPException, _http)
    app.add_exception_handler(Replay, _replay)
    app.add_exception_handler(Exception, _unexpected)
