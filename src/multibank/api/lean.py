"""A route's request handler with FastAPI's own semantics and its per-request introspection done
once, when the route is built (issue 11, decision 0019).

FastAPI's handler walks a route's dependency tree on every request and, for each parameter,
asks again whether its annotation is a model, a sequence or JSON, which aliases it has, and how
its dependencies are called: for one account read that was a fifth of the request, for a page
with eleven query filters nearly a third. This handler compiles the same tree once into a plan
(which callables to await with which arguments, which path and query fields to read from which
key) and runs it per request with the framework's own validation of each value: the same
`ModelField.validate`, the same errors and `RequestValidationError`, the same response
validation and serialisation (`serialize_response`), the same body parsing.

It covers what this project's routes use: `async` dependencies without `yield`, a `Request`
parameter, path and query parameters, header parameters (solved by the framework's own
function), and a JSON body. A route using anything else (a `Response` or `BackgroundTasks`
parameter, forms, streams, `yield` dependencies, parameter models...) keeps FastAPI's handler,
as does a route built by `include_router` or with dependency overrides: the version
applications add their routes as they are, with neither.
"""

from __future__ import annotations

import email.message
import inspect
import json
from collections.abc import Awaitable, Callable, Coroutine, Hashable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from fastapi import params
from fastapi._compat import ModelField, Undefined, field_annotation_is_sequence
from fastapi.datastructures import DefaultPlaceholder
from fastapi.dependencies.models import Dependant
from fastapi.dependencies.utils import (
    _get_form_models,
    _get_param_aliases,
    _get_param_model,
    _is_json_field,
    _should_embed_body_fields,
    _validate_value_with_model_field,
    request_body_to_args,
    request_params_to_args,
)
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute, _effective_route_context_var, serialize_response
from fastapi.utils import is_body_allowed_for_status_code
from pydantic_core import to_json
from starlette._utils import is_async_callable
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import QueryParams
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from multibank.api.jsonbody import DuplicateKey, StrictJsonRequest, duplicate_key_error, loads
from multibank.kernel.wire import PLAIN_BODY, plain_json

Handler = Callable[[Request], Coroutine[Any, Any, Response]]

# An endpoint marked `trusted` builds its answer with its response model's fields, in the
# model's order, and leaves out what would be None: its body is dumped to JSON as it is, without
# first being validated into model instances (for a page of ten accounts 65 µs, against 13 µs
# for the dump alone; decision 0022). The test suite sets `CHECK_TRUSTED`: then every such
# answer is also validated and serialised as any other, and must be the same bytes, or the
# request fails.
_TRUSTED = "_multibank_trusted_response"
CHECK_TRUSTED = False

E = TypeVar("E", bound=Callable[..., Any])


def trusted(endpoint: E) -> E:
    setattr(endpoint, _TRUSTED, True)
    return endpoint


def without_none(body: dict[str, Any]) -> dict[str, Any]:
    """A trusted body built with None where its model has nothing to say, with those left out
    at every level, as `response_model_exclude_none` would leave them out (a dict inside a
    list is left as it is: the check in the tests says whether that is what the model does)."""
    return {k: without_none(v) if type(v) is dict else v for k, v in body.items() if v is not None}


class UntrustworthyResponse(AssertionError):
    """A trusted endpoint answered what its response model would not (tests only)."""


class Unsupported(Exception):
    """The route uses something the lean handler does not do: FastAPI's handler serves it."""


@dataclass(frozen=True)
class Param:
    field: ModelField
    name: str
    alias: str
    sequence: bool
    loc: tuple[str, str]
    # What an absent optional parameter takes without validation, when it is immutable (FastAPI
    # deep-copies the default on every request); Undefined: ask the framework.
    constant_default: Any = Undefined


# Defaults that a deep copy returns as they are.
_IMMUTABLE = (type(None), bool, int, float, str, bytes)


@dataclass
class Plan:
    """One level of the dependency tree: what to solve before awaiting `call`."""

    call: Callable[..., Awaitable[Any]]
    name: str | None
    cache_key: int | None  # solved once per request when set (FastAPI's `use_cache`)
    subs: list[Plan] = field(default_factory=list)
    request_name: str | None = None
    path: list[Param] = field(default_factory=list)
    query: list[Param] = field(default_factory=list)
    headers: list[ModelField] = field(default_factory=list)
    body: list[ModelField] = field(default_factory=list)
    embed_body_fields: bool = False
    # Plans whose body fields are declared alike validate the body alike: a request validates
    # it once for all of them (FastAPI does it again for each dependency that names the body).
    body_key: tuple[Any, ...] = ()
    # The one body field validated as the whole body (FastAPI's `single_not_embedded_field`,
    # decided here once rather than by `request_body_to_args` on every request).
    whole_body: ModelField | None = None


def _param(f: ModelField, where: str) -> Param:
    if _get_param_model(f) is not None or _is_json_field(f):
        raise Unsupported(f"{where} parameter {f.name}")
    aliases = _get_param_aliases(f)
    if len(aliases) != 1 or aliases[0][0] != aliases[0][1]:
        raise Unsupported(f"aliases of {f.name}")
    alias = aliases[0][1]
    sequence = field_annotation_is_sequence(f.field_info.annotation)
    info = f.field_info
    constant: Any = Undefined
    if not info.is_required() and not info.validate_default:
        default = f.default
        if isinstance(default, _IMMUTABLE):
            constant = default
    return Param(f, f.name, alias, sequence, (where, alias), constant)


def _is_coroutine(call: Any) -> bool:
    if inspect.isroutine(call):
        return inspect.iscoroutinefunction(call)
    return callable(call) and inspect.iscoroutinefunction(type(call).__call__)


def compile_plan(dependant: Dependant, embed_body_fields: bool) -> Plan:
    call = dependant.call
    if call is None or not _is_coroutine(call):
        raise Unsupported("a dependency that is not a coroutine function")
    if (
        dependant.cookie_params
        or dependant.websocket_param_name
        or dependant.response_param_name
        or dependant.background_tasks_param_name
        or dependant.security_scopes_param_name
        or dependant.concurrency is not None
        or dependant.own_oauth_scopes
        or dependant.parent_oauth_scopes
    ):
        raise Unsupported("a parameter kind the lean handler does not solve")
    plan = Plan(
        call=call,
        name=dependant.name,
        cache_key=id(call) if dependant.use_cache else None,
        request_name=dependant.request_param_name or dependant.http_connection_param_name,
        path=[_param(f, "path") for f in dependant.path_params],
        query=[_param(f, "query") for f in dependant.query_params],
        headers=list(dependant.header_params),
        body=list(dependant.body_params),
        embed_body_fields=embed_body_fields,
        body_key=(
            "body",
            embed_body_fields,
            *((f.name, f.alias, f.mode, repr(f.field_info)) for f in dependant.body_params),
        ),
    )
    if (
        len(plan.body) == 1
        and not embed_body_fields
        and not _should_embed_body_fields(plan.body)
        and not _get_form_models(plan.body[0])
    ):
        plan.whole_body = plan.body[0]
    for sub in dependant.dependencies:
        plan.subs.append(compile_plan(sub, embed_body_fields))
    return plan


def _read(params_: list[Param], received: Any, values: dict[str, Any], errors: list[Any]) -> None:
    for p in params_:
        value: Any
        if p.sequence:
            value = received.getlist(p.alias)
            if not value:
                value = Undefined
        elif p.alias in received:
            value = received[p.alias]
        else:
            # Not `received.get`: Starlette's multi-dicts take it from `Mapping`, which raises
            # and catches a KeyError for each parameter not sent (a page's ten absent filters).
            value = Undefined
        if value is Undefined and p.constant_default is not Undefined:
            values[p.name] = p.constant_default
            continue
        v, errs = _validate_value_with_model_field(
            field=p.field, value=value, values=values, loc=p.loc
        )
        if errs:
            errors.extend(errs)
        else:
            values[p.name] = v


async def _solve(
    plan: Plan,
    request: Request,
    body: Any,
    cache: dict[Hashable, Any],
    errors: list[Any],
    plain: bool = False,
) -> dict[str, Any]:
    """The arguments of `plan.call`, in FastAPI's order: sub-dependencies (each awaited unless
    its own arguments had errors), then path, query and header parameters, then the body.
    `plain`: the body's JSON text passed `wire.plain_json` (its validation skips the walks)."""
    values: dict[str, Any] = {}
    for sub in plan.subs:
        if sub.cache_key is not None and sub.cache_key in cache:
            solved = cache[sub.cache_key]
        else:
            own_errors: list[Any] = []
            sub_values = await _solve(sub, request, body, cache, own_errors, plain)
            if own_errors:
                errors.extend(own_errors)
                continue
            solved = await sub.call(**sub_values)
            if sub.cache_key is not None:
                cache[sub.cache_key] = solved
        if sub.name is not None:
            values[sub.name] = solved
    if plan.path:
        _read(plan.path, request.path_params, values, errors)
    if plan.query:
        _read(plan.query, query_params(request), values, errors)
    if plan.headers:
        header_values, header_errors = request_params_to_args(plan.headers, request.headers)
        values.update(header_values)
        errors.extend(header_errors)
    if plan.body:
        validated = cache.get(plan.body_key)
        if validated is None:
            checked = PLAIN_BODY.set(True) if plain else None
            try:
                whole = plan.whole_body
                if whole is not None:  # as `request_body_to_args` does (never a form here)
                    value, body_errors = _validate_value_with_model_field(
                        field=whole, value=body, values={}, loc=("body",)
                    )
                    validated = {whole.name: value}, body_errors
                else:
                    validated = await request_body_to_args(
                        body_fields=plan.body,
                        received_body=body,
                        embed_body_fields=plan.embed_body_fields,
                    )
            finally:
                if checked is not None:
                    PLAIN_BODY.reset(checked)
            cache[plan.body_key] = validated
        body_values, body_errors = validated
        values.update(body_values)
        errors.extend(body_errors)
    if plan.request_name:
        values[plan.request_name] = request
    return values


# Query strings already parsed, by their bytes. A client pages with the same few query strings
# over and over, and parsing one (`parse_qsl`, then a multi-dict) cost a page of accounts 7 µs.
# `QueryParams` is immutable, so one may serve every request that sent the same bytes. Short
# strings only, and only so many: they are the client's.
_QUERIES: dict[bytes, QueryParams] = {}
_QUERY_KEPT_BYTES = 200
_QUERIES_KEPT = 256


def query_params(request: Request) -> QueryParams:
    """The request's query parameters, parsed once per distinct query string."""
    raw = request.scope.get("query_string", b"")
    found = _QUERIES.get(raw)
    if found is None:
        found = request.query_params
        if len(raw) <= _QUERY_KEPT_BYTES:
            if len(_QUERIES) >= _QUERIES_KEPT:
                _QUERIES.clear()
            _QUERIES[raw] = found
    return found


_JSON_TYPES: dict[str, bool] = {}


def _is_json(content_type: str) -> bool:
    """FastAPI's test of a JSON content type, remembered per header value (parsing it with
    `email.message` cost more than decoding a small body)."""
    known = _JSON_TYPES.get(content_type)
    if known is None:
        message = email.message.Message()
        message["content-type"] = content_type
        subtype = message.get_content_subtype()
        known = message.get_content_maintype() == "application" and (
            subtype == "json" or subtype.endswith("+json")
        )
        if len(_JSON_TYPES) >= 64:  # header values are the client's: keep only a few
            _JSON_TYPES.clear()
        _JSON_TYPES[content_type] = known
    return known


async def read_body(request: Request) -> bytes:
    """`Request.body()` as Starlette reads it, without the async generator (`stream`, closed by
    `aclosing`) it reads through: the same messages, the same errors, the same `_body` kept
    for every later `body()` and `json()`. The generator's hooks and weak references were a
    quarter of what a small body cost the handler (decision 0034)."""
    known: bytes | None = getattr(request, "_body", None)  # (no exception raised to miss it)
    if known is not None:
        return known
    if request._stream_consumed:
        raise RuntimeError("Stream consumed")
    chunks: list[bytes] = []
    while not request._stream_consumed:
        message = await request._receive()
        if message["type"] == "http.request":
            chunk = message.get("body", b"")
            if not message.get("more_body", False):
                request._stream_consumed = True
            if chunk:
                chunks.append(chunk)
        elif message["type"] == "http.disconnect":
            request._is_disconnected = True
            raise ClientDisconnect()
    body = request._body = b"".join(chunks)
    return body


async def _json_body(request: Request, strict: bool) -> Any:
    """The body as FastAPI reads it for a JSON body field (`get_request_handler`), a key
    repeated in an object refused (`lean_app`'s requests decode with `jsonbody.loads`)."""
    try:
        body_bytes = await read_body(request)
        if not body_bytes:
            return Undefined
        content_type = request.headers.get("content-type")
        if not content_type:
            return body_bytes if strict else await request.json()
        if _is_json(content_type):
            return await request.json()
        return body_bytes
    except DuplicateKey as e:
        raise duplicate_key_error(e) from None
    except json.JSONDecodeError as e:
        raise RequestValidationError(
            [
                {
                    "type": "json_invalid",
                    "loc": ("body", e.pos),
                    "msg": "JSON decode error",
                    "input": {},
                    "ctx": {"error": e.msg},
                }
            ],
            body=e.doc,
        ) from e
    except HTTPException:
        raise
    except Exception as e:
        raise HTTPException(status_code=400, detail="There was an error parsing the body") from e


def _refusing_duplicate_keys(handler: Handler, strict_content_type: bool) -> Handler:
    """FastAPI's handler, whose request decodes its JSON body leniently, with the body checked
    by `jsonbody.loads` first where that handler will decode it as JSON: a repeated key is
    the 400 it is on lean routes. Anything else wrong with the body is left to FastAPI."""

    async def handle(request: Request) -> Response:
        try:
            body = await request.body()
            content_type = request.headers.get("content-type")
            if body and (_is_json(content_type) if content_type else not strict_content_type):
                loads(body)
        except DuplicateKey as e:
            raise duplicate_key_error(e) from None
        except Exception:  # FastAPI's handler meets it again and answers as it does
            pass
        return await handler(request)

    return handle


def lean_handler(route: APIRoute) -> Handler:
    """The route's request handler; raises `Unsupported` where FastAPI's must serve."""
    if _effective_route_context_var.get() is not None:
        # Built for an `include_router`, whose inclusion may add dependencies, a prefix and
        # dependency overrides that only FastAPI's own handler knows of.
        raise Unsupported("a route included in an application")
    if route.dependency_overrides_provider is not None:
        raise Unsupported("a route whose dependencies may be overridden")
    dependant = route.dependant
    if getattr(route, "is_sse_stream", False) or getattr(route, "is_json_stream", False):
        raise Unsupported("a stream")
    if route.stream_item_field is not None:
        raise Unsupported("a stream")
    call = dependant.call
    if call is None or inspect.isasyncgenfunction(call) or inspect.isgeneratorfunction(call):
        raise Unsupported("a generator endpoint")
    response_class = route.response_class
    actual_class: type[Response] = (
        response_class.value if isinstance(response_class, DefaultPlaceholder) else response_class
    )
    body_field = route.body_field
    if body_field is not None and isinstance(body_field.field_info, params.Form):
        raise Unsupported("a form")
    plan = compile_plan(dependant, route._embed_body_fields)
    strict = route.strict_content_type
    strict_content_type = strict.value if isinstance(strict, DefaultPlaceholder) else strict
    response_field = route.response_field
    status_code = route.status_code
    # FastAPI's fast path: JSON bytes straight from pydantic-core when no class was chosen.
    dump_json = response_field is not None and isinstance(response_class, DefaultPlaceholder)
    trusted_body = dump_json and getattr(route.endpoint, _TRUSTED, False)
    status: dict[str, Any] = {"status_code": status_code} if status_code else {}
    options: dict[str, Any] = {
        "include": route.response_model_include,
        "exclude": route.response_model_exclude,
        "by_alias": route.response_model_by_alias,
        "exclude_unset": route.response_model_exclude_unset,
        "exclude_defaults": route.response_model_exclude_defaults,
        "exclude_none": route.response_model_exclude_none,
    }

    async def handle(request: Request) -> Response:
        body: Any = Undefined
        plain = False
        if body_field is not None:
            body = await _json_body(request, strict_content_type)
            # Decoded from JSON text (not bytes passed on as they came): maybe plain text.
            if body is not Undefined and not isinstance(body, bytes):
                plain = plain_json(await request.body())
        errors: list[Any] = []
        values = await _solve(plan, request, body, {}, errors, plain)
        if errors:
            raise RequestValidationError(errors, body=None if body is Undefined else body)
        raw = await plan.call(**values)
        if isinstance(raw, Response):
            return raw
        if trusted_body:
            content = to_json(raw)
            if CHECK_TRUSTED:
                expected = await serialize_response(
                    field=response_field, response_content=raw, dump_json=True, **options
                )
                if content != expected:
                    raise UntrustworthyResponse(f"{content!r} is not {expected!r}")
        else:
            content = await serialize_response(
                field=response_field, response_content=raw, dump_json=dump_json, **options
            )
        if dump_json:
            response = Response(content=content, media_type="application/json", **status)
        else:
            response = actual_class(content, **status)
        if not is_body_allowed_for_status_code(response.status_code):
            response.body = b""
        return response

    return handle


def lean_app(handler: Handler) -> ASGIApp:
    """The route's ASGI application: FastAPI's `request_response` without the exit stacks that
    only `yield` dependencies use, handing an exception to the application's handlers as
    Starlette's `wrap_app_handling_exceptions` does."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        request = StrictJsonRequest(scope, receive, send)
        try:
            response = await handler(request)
        except Exception as exc:
            handled = await _handled(request, exc)
            if handled is None:
                return
            response = handled
        await response(scope, receive, send)

    return app


async def _handled(request: Request, exc: Exception) -> Response | None:
    exception_handlers, status_handlers = request.scope.get(
        "starlette.exception_handlers", ({}, {})
    )
    handler = None
    if isinstance(exc, HTTPException):
        handler = status_handlers.get(exc.status_code)
    if handler is None:
        for cls in type(exc).__mro__:
            if cls in exception_handlers:
                handler = exception_handlers[cls]
                break
    if handler is None:
        raise exc
    if is_async_callable(handler):
        response: Response | None = await handler(request, exc)
    else:
        response = await run_in_threadpool(handler, request, exc)
    # Reused exception instances accumulate tracebacks across requests.
    exc.__traceback__ = None
    return response


class LeanRoute(APIRoute):
    """A route answered by the lean handler where it applies and by FastAPI's elsewhere.
    `wrap` lets a subclass put its own work around either (`api.routing.UnitOfWorkRoute`: the
    request's transaction)."""

    lean = False  # decided by `get_route_handler`, which the framework's init calls

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        super().__init__(path, endpoint, **kwargs)
        if self.lean:
            self.app = lean_app(self.get_route_handler())

    def get_route_handler(self) -> Handler:
        try:
            handler = lean_handler(self)
            self.lean = True
        except Unsupported:
            handler = super().get_route_handler()
            self.lean = False
            body_field = self.body_field
            if body_field is not None and not isinstance(body_field.field_info, params.Form):
                strict = self.strict_content_type
                handler = _refusing_duplicate_keys(
                    handler, strict.value if isinstance(strict, DefaultPlaceholder) else strict
                )
        return self.wrap(handler)

    def wrap(self, handler: Handler) -> Handler:
        return handler
