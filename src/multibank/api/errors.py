"""The error bodies of contract §2, installed on every application the server mounts."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from multibank.kernel.errors import DomainError
from multibank.kernel.idempotency import StoredResponse

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
}


class Replay(Exception):
    """Raised by the idempotency dependency: answer with the stored first response."""

    def __init__(self, stored: StoredResponse) -> None:
        self.stored = stored


def _field_name(loc: Sequence[Any]) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:]
    return ".".join(parts) or "body"


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
    for key in ("ge", "gt", "le", "lt"):
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


def validation_body(errors: Sequence[Any], request: Request | None = None) -> dict[str, Any]:
    fields: list[dict[str, Any]] = []
    messages: list[str] = []
    for err in errors:
        if err["type"] == "json_invalid":
            return {"message": "Malformed JSON request body."}
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
    return JSONResponse(validation_body(exc.errors(), request), status_code=400)


async def _http(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    codes = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED", 401: "UNAUTHORIZED", 400: "BAD_REQUEST"}
    if exc.status_code in (401, 403, 423, 429):
        return Response(status_code=exc.status_code, headers=exc.headers)
    status, detail = exc.status_code, str(exc.detail)
    if status == 404 and "//" in request.url.path:
        # The reference answers 405 when an id segment is empty (`/managed_accounts//block`).
        status, detail = 405, "Method Not Allowed"
    body = {"code": codes.get(status, str(status)), "message": detail}
    return JSONResponse(body, status_code=status, headers=exc.headers)


async def _replay(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, Replay)
    s = exc.stored
    return Response(content=s.body, status_code=s.status_code, media_type=s.content_type)


async def _unexpected(request: Request, exc: Exception) -> Response:
    # The client learns nothing of the failure but the request-ref that finds it in the logs.
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return JSONResponse({"code": "INTERNAL_ERROR", "message": "Internal error"}, status_code=500)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(DomainError, _domain)
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(StarletteHTTPException, _http)
    app.add_exception_handler(Replay, _replay)
    app.add_exception_handler(Exception, _unexpected)
