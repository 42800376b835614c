"""OpenAPI descriptions that declare exactly what each operation answers.

FastAPI describes a route from its signature: the success response, and a 422 the server never
sends (our validation errors are 400, contract §2). Generated clients take the description as
the contract, so every application the server mounts is a `DescribedApp`, whose document is
post-processed once:

- the answers a route can give because of its dependencies are derived from the dependency tree:
  a dependency marked with `@answers(...)` contributes its statuses (the api-key check 400/401,
  the session check 401/403, step-up 403 with its body, idempotency 400/413, rate limits 429,
  ...); a route with parameters or a body can answer 400; a route whose path names an id can
  answer 404;
- what only the domain knows (409 `errorCode` values, 404 of a lookup, 423) stays declared on the
  route (`responses=conflicts(...)`, `not_found(...)`, `LOCKED`);
- each status gets the body schema the server sends for it (none for 401, 423, 429), 429 its
  `x-ratelimit-*` headers, and every response the `request-ref` header;
- a dependency marked with `@secured(scheme, ...)` reads those credentials from the request
  itself (one dependency instead of one per scheme, solved on every request); the operations
  using it declare the schemes as FastAPI declares a `Security(scheme)` dependency: each
  scheme in `components.securitySchemes` and a security requirement naming it;
- the 422 FastAPI invents is removed, and an operation needing both `api_key` and `auth_token`
  has one security requirement object holding both (two objects would mean either), unless the
  route lists its alternatives itself (`x-security-alternatives` in its `openapi_extra`).

`tests/conftest.py` checks every answer of the whole test suite against these documents, and
schemathesis checks them against a running server.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar, cast

import fastapi_offline
from fastapi import FastAPI, Request
from fastapi.dependencies.models import Dependant
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.routing import APIRoute, iter_route_contexts
from fastapi.security.base import SecurityBase
from fastapi.telemetry import TelemetryConfig

F = TypeVar("F", bound=Callable[..., Any])

# Marks on dependency callables: the statuses a request can get because the dependency ran.
_ANSWERS = "__multibank_answers__"
_SECURED = "__multibank_secured__"
STEP_UP = "step-up"  # a 403 with the STEP_UP_REQUIRED body
IDEMPOTENCY_REF = "idempotency-ref"  # declares the optional `idempotency-ref` header


def answers(*statuses: int | str) -> Callable[[F], F]:
    """Marks a dependency with the statuses (or the markers above) it can answer."""

    def mark(call: F) -> F:
        setattr(call, _ANSWERS, frozenset(statuses))
        return call

    return mark


def secured(*schemes: SecurityBase) -> Callable[[F], F]:
    """Marks a dependency that reads the credentials of `schemes` from the request itself: the
    operations that use it declare them in their security requirement, in this order."""

    def mark(call: F) -> F:
        setattr(call, _SECURED, schemes)
        return call

    return mark


def mark(call: Any, *statuses: int | str) -> None:
    """`answers` for a callable object that is not defined with `def` (a security scheme)."""
    setattr(call, _ANSWERS, frozenset(statuses))


ERROR_ENUM = [
    "REQUIRED",
    "HAS_TEXT",
    "REQUIRES",
    "SIZE",
    "RANGE",
    "IN",
    "NOT_IN",
    "REGEX",
    "EXACTLY",
    "AT_LEAST",
    "AT_MOST",
    "ALL_OR_NONE",
]

SCHEMAS: dict[str, dict[str, Any]] = {
    "ErrorBody": {
        "title": "ErrorBody",
        "description": "400: the request is malformed; nothing changed.",
        "type": "object",
        "properties": {
            "message": {"type": "string", "maxLength": 255},
            "syntaxErrors": {
                "type": "object",
                "properties": {
                    "invalidFields": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "fieldName": {"type": "string"},
                                "error": {"type": "string", "enum": ERROR_ENUM},
                                "params": {"type": "array", "items": {"type": "string"}},
                            },
                        },
                    }
                },
            },
        },
    },
    "Error": {
        "title": "Error",
        "type": "object",
        "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
    },
    "PayloadTooLarge": {
        "title": "PayloadTooLarge",
        "type": "object",
        "properties": {"message": {"type": "string"}},
    },
}

HEADERS: dict[str, dict[str, Any]] = {
    "request-ref": {
        "description": "The request's id; the server's logs carry the same value.",
        "required": True,
        "schema": {"type": "string"},
    },
    "x-ratelimit-limit": {
        "description": "The exceeded limit first, then `limit;w=windowSeconds` for each limit.",
        "required": True,
        "schema": {"type": "string"},
    },
    "x-ratelimit-reset": {
        "description": "Seconds until the exceeded window resets.",
        "required": True,
        "schema": {"type": "integer", "format": "int32", "minimum": 0},
    },
    "Retry-After": {
        "description": "Seconds to wait before retrying.",
        "required": True,
        "schema": {"type": "integer", "minimum": 0},
    },
}

DESCRIPTIONS = {
    400: "Bad request: a malformed field, malformed JSON (a key repeated in an object too), a "
    "missing header, or a payload that does not match an earlier one sent with the same "
    "idempotency-ref. Nothing changed.",
    401: "Unauthorized: an unknown api-key, or a missing, bad, expired or ended token. No body.",
    403: "Forbidden: a token of another programme, or of an identity this operation is not "
    "for. No body.",
    404: "Not found: no such object for this caller.",
    405: "Method not allowed.",
    409: "Refused by a business rule; nothing changed.",
    413: "Payload too large: a body over 1 MiB, or an idempotency-ref over 255 characters.",
    423: "Locked: too many failed logins; retry after 30 minutes. No body.",
    429: "Too many requests; see the x-ratelimit headers. No body.",
    503: "The database is unavailable (unreachable, or no connection free in time), or "
    "concurrent requests kept the rows this one needed (a deadlock, still there after the "
    "server ran it again): retry after the Retry-After seconds. Nothing changed.",
}

_ERROR_REF = {"$ref": "#/components/schemas/Error"}
_BODIES: dict[int, dict[str, Any]] = {
    400: {"$ref": "#/components/schemas/ErrorBody"},
    404: _ERROR_REF,
    405: _ERROR_REF,
    413: {"$ref": "#/components/schemas/PayloadTooLarge"},
    503: _ERROR_REF,
}

STEP_UP_BODY = {
    "type": "object",
    "properties": {
        "errorCode": {"type": "string", "enum": ["STEP_UP_REQUIRED"]},
        "message": {"type": "string", "enum": ["STEP_UP_REQUIRED"]},
    },
}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def not_found(what: str = "No such object for this caller") -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` of an operation whose lookup can miss."""
    return {404: {"description": f"Not found: {what}.", "content": _json(_ERROR_REF)}}


LOCKED: dict[int | str, dict[str, Any]] = {423: {"description": DESCRIPTIONS[423]}}


def _walk(dependant: Dependant) -> Iterator[Dependant]:
    yield dependant
    for sub in dependant.dependencies:
        yield from _walk(sub)


def _marks(route: APIRoute) -> set[int | str]:
    found: set[int | str] = set()
    for dep in _walk(route.dependant):
        found |= getattr(dep.call, _ANSWERS, frozenset())
    return found


def declared_schemes(route: APIRoute) -> list[SecurityBase]:
    """The security schemes the route's `@secured` dependencies read, each once, in the order
    of its dependency tree (FastAPI's order for `Security(scheme)` dependencies)."""
    found: dict[str, SecurityBase] = {}
    for dep in _walk(route.dependant):
        for scheme in getattr(dep.call, _SECURED, ()):
            found.setdefault(scheme.scheme_name, scheme)
    return list(found.values())


def scheme_document(scheme: SecurityBase) -> dict[str, Any]:
    """A scheme's `components.securitySchemes` entry, as FastAPI writes it."""
    return scheme.model.model_dump(mode="json", by_alias=True, exclude_none=True)


def _has_input(route: APIRoute) -> bool:
    for dep in _walk(route.dependant):
        if dep.path_params or dep.query_params or dep.header_params or dep.body_params:
            return True
    return False


def _names_an_id(route: APIRoute) -> bool:
    """A path parameter that is a digits id: the object may not exist for this caller."""
    for dep in _walk(route.dependant):
        for param in dep.path_params:
            if param.name == "id" or param.name.endswith("_id"):
                return True
    return False


def derived_statuses(route: APIRoute) -> set[int | str]:
    """What a route can answer because of how it is built (not what its service decides)."""
    statuses = _marks(route)
    statuses.add(503)  # every operation reads the database
    if _has_input(route):
        statuses.add(400)
    if _names_an_id(route):
        statuses.add(404)
    return statuses


def _error_response(status: int) -> dict[str, Any]:
    out: dict[str, Any] = {"description": DESCRIPTIONS.get(status, str(status))}
    if status in _BODIES:
        out["content"] = _json(_BODIES[status])
    if status == 429:
        out["headers"] = {
            "x-ratelimit-limit": {"$ref": "#/components/headers/x-ratelimit-limit"},
            "x-ratelimit-reset": {"$ref": "#/components/headers/x-ratelimit-reset"},
        }
    if status == 503:
        out["headers"] = {"Retry-After": {"$ref": "#/components/headers/Retry-After"}}
    return out


def _describe_operation(route: APIRoute, operation: dict[str, Any]) -> None:
    responses: dict[str, Any] = operation.setdefault("responses", {})
    schemes = declared_schemes(route)
    if schemes:
        # Where FastAPI puts a `Security(scheme)` dependency's requirement; merged below.
        security_list: list[dict[str, list[str]]] = operation.setdefault("security", [])
        security_list.extend({scheme.scheme_name: []} for scheme in schemes)
    responses.pop("422", None)
    statuses = derived_statuses(route)
    for status in sorted(s for s in statuses if isinstance(s, int)):
        key = str(status)
        declared = responses.get(key)
        generated = _error_response(status)
        if declared is None:
            responses[key] = generated
        else:
            # The route's own declaration (409 codes, a 404's meaning) wins; what it left out
            # (a body schema, headers) comes from the generic answer.
            for field, value in generated.items():
                declared.setdefault(field, value)
    if STEP_UP in statuses:
        responses["403"] = {
            "description": "STEP_UP_REQUIRED when the programme demands a stepped-up session "
            "and this one is not (start and verify a step-up challenge, then call again with "
            "the same token); a token of another programme is refused with no body.",
            "content": _json(STEP_UP_BODY),
        }
    if IDEMPOTENCY_REF in statuses:
        params: list[dict[str, Any]] = operation.setdefault("parameters", [])
        if not any(p.get("name") == "idempotency-ref" for p in params):
            params.append(
                {
                    "name": "idempotency-ref",
                    "in": "header",
                    "required": False,
                    "description": "Makes a retry safe: the same ref with the same payload "
                    "answers the first response again and changes nothing (kept 24 hours).",
                    "schema": {"type": "string", "minLength": 1, "maxLength": 255},
                }
            )
    for key, response in responses.items():
        if key.isdigit():
            response.setdefault("headers", {})["request-ref"] = {
                "$ref": "#/components/headers/request-ref"
            }
    security = operation.get("security")
    alternatives = operation.pop("x-security-alternatives", None)
    if alternatives is not None:
        # A route whose credentials are either of these (the sandbox's tokenize: the programme
        # key alone, or with the owner's Bearer token) says so itself.
        operation["security"] = alternatives
    elif security and len(security) > 1:
        merged: dict[str, list[str]] = {}
        for requirement in security:
            merged.update(requirement)
        operation["security"] = [merged]
    operation["responses"] = dict(sorted(responses.items()))


def _routes(app: FastAPI) -> Iterable[APIRoute]:
    """The application's operations, with what the routers they were included through add
    (a router's own dependencies: the portal's admin check)."""
    for context in iter_route_contexts(app.routes):
        if isinstance(context.original_route, APIRoute) and context.include_in_schema:
            yield cast(APIRoute, context)


def _uses(document: Any, ref: str) -> bool:
    if isinstance(document, dict):
        return any(v == ref for v in document.values()) or any(
            _uses(v, ref) for v in document.values()
        )
    if isinstance(document, list):
        return any(_uses(v, ref) for v in document)
    return False


STORABLE_TEXT = "^[^\\u0000]*$"
# Formats whose values are free text all the same (a password may hold any character but NUL).
_FREE_TEXT_FORMATS = frozenset({"password"})


def _storable_strings(node: Any) -> None:
    """Every free-text string says that it holds no NUL (kernel/wire.py `storable`: such text is
    refused 400, so the description must not call it valid). Strings already constrained by a
    pattern, an enumeration or a format that excludes it (an e-mail) are left as they are."""
    if isinstance(node, dict):
        if (
            node.get("type") == "string"
            and not {"pattern", "enum", "const"} & set(node)
            and (node.get("format") is None or node["format"] in _FREE_TEXT_FORMATS)
        ):
            node["pattern"] = STORABLE_TEXT
        for value in node.values():
            _storable_strings(value)
    elif isinstance(node, list):
        for value in node:
            _storable_strings(value)


_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
EXACT_FLOATS = 2**53  # every integer up to this magnitude is a float exactly


def _exact_integers(node: Any) -> None:
    """Integer bounds as integers. FastAPI's OpenAPI model keeps a schema's bounds as floats:
    an amount's `le=2**63 - 1` came out as 9.223372036854776e18, which is 2^63 (a value no
    int64 holds, written as a float). Every integer of this wire is an int64 (the database's
    BIGINT), so a bound the float pushed to ±2^63 is int64's own; one within ±2^53 is the
    integer it was written as. Any other float stays, for the test of the documents to find."""
    if isinstance(node, dict):
        if node.get("type") == "integer":
            for key in _BOUNDS:
                value = node.get(key)
                if isinstance(value, float) and value.is_integer():
                    if value >= 2**63:
                        node[key] = INT64_MAX
                    elif value <= INT64_MIN:
                        node[key] = INT64_MIN
                    elif abs(value) <= EXACT_FLOATS:
                        node[key] = int(value)
        for value in node.values():
            _exact_integers(value)
    elif isinstance(node, list):
        for value in node:
            _exact_integers(value)


def _refs(node: Any) -> set[str]:
    """Names of the component schemas `node` refers to directly."""
    found: set[str] = set()
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
            found.add(ref.rsplit("/", 1)[1])
        for value in node.values():
            found |= _refs(value)
    elif isinstance(node, list):
        for value in node:
            found |= _refs(value)
    return found


def describe(app: FastAPI, document: dict[str, Any]) -> dict[str, Any]:
    paths: dict[str, Any] = document.get("paths", {})
    components = document.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    for route in _routes(app):
        item = paths.get(route.path_format, {})
        for method in route.methods or ():
            operation = item.get(method.lower())
            if operation is not None:
                _describe_operation(route, operation)
                for scheme in declared_schemes(route):
                    security_schemes = components.setdefault("securitySchemes", {})
                    security_schemes.setdefault(scheme.scheme_name, scheme_document(scheme))
    _exact_integers(document)
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    for name, schema in SCHEMAS.items():
        if _uses(paths, f"#/components/schemas/{name}"):
            schemas[name] = schema
    components["headers"] = {
        name: header
        for name, header in HEADERS.items()
        if _uses(paths, f"#/components/headers/{name}")
    }
    if not components["headers"]:
        del components["headers"]
    # What a client sends (parameters, request bodies, and the schemas they refer to, however
    # deep) holds no NUL; answers are left alone (an error may echo a field name it refused).
    sent: list[Any] = [
        part
        for item in paths.values()
        for operation in item.values()
        if isinstance(operation, dict)
        for part in (operation.get("parameters"), operation.get("requestBody"))
        if part
    ]
    _storable_strings(sent)
    seen: set[str] = set()
    todo = _refs(sent)
    while todo:
        name = todo.pop()
        if name in seen or name not in schemas:
            continue
        seen.add(name)
        _storable_strings(schemas[name])
        todo |= _refs(schemas[name])
    return document


# Swagger UI and ReDoc, served by the server itself from the assets the `fastapi-offline`
# package ships (mounted once, at this path, by `app.create_app`): the docs pages work offline,
# where FastAPI's own load their scripts from a public CDN.
DOCS_ASSETS = Path(fastapi_offline.__file__).parent / "static"
DOCS_ASSETS_URL = "/static/docs"


# The framework's own OpenTelemetry hooks are off: the server's metrics are its Prometheus
# collectors (observability.py), and the hooks would check the environment on every request.
NO_TELEMETRY: TelemetryConfig = {"tracing": False, "metrics": False, "logs": False}


class ServerApp(FastAPI):
    """A FastAPI application with the framework's OpenTelemetry hooks off (`telemetry`, one of
    its public arguments); anything else as FastAPI builds it."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("telemetry", NO_TELEMETRY)
        super().__init__(**kwargs)


class DescribedApp(ServerApp):
    """A FastAPI application whose OpenAPI document declares exactly what it answers, with its
    Swagger UI at `docs_url` and ReDoc at `redoc_url`, both working offline."""

    def __init__(self, **kwargs: Any) -> None:
        docs_url = kwargs.pop("docs_url", "/docs")
        redoc_url = kwargs.pop("redoc_url", "/redoc")
        super().__init__(docs_url=None, redoc_url=None, **kwargs)
        if docs_url:
            self.add_api_route(docs_url, self._swagger_ui, include_in_schema=False)
        if redoc_url:
            self.add_api_route(redoc_url, self._redoc, include_in_schema=False)
        if docs_url:
            # A base URL typed into a browser (`/multi/`) leads to its docs, not to a 404.
            self.add_api_route("/", self._to_docs, methods=["GET", "HEAD"], include_in_schema=False)
            self._docs_url = docs_url

    async def _to_docs(self, request: Request) -> RedirectResponse:
        return RedirectResponse(f"{request.scope.get('root_path', '')}{self._docs_url}", 307)

    def _urls(self, request: Request) -> tuple[str, str]:
        """The description's URL (under this application's mount) and the assets' (under the
        server's root: they are mounted once for every application)."""
        scope = request.scope
        assets = f"{scope.get('app_root_path', '')}{DOCS_ASSETS_URL}"
        return f"{scope.get('root_path', '')}{self.openapi_url}", assets

    async def _swagger_ui(self, request: Request) -> HTMLResponse:
        openapi, assets = self._urls(request)
        return get_swagger_ui_html(
            openapi_url=openapi,
            title=f"{self.title} - Swagger UI",
            swagger_js_url=f"{assets}/swagger-ui-bundle.js",
            swagger_css_url=f"{assets}/swagger-ui.css",
            swagger_favicon_url=f"{assets}/favicon.png",
            swagger_ui_parameters=self.swagger_ui_parameters,
        )

    async def _redoc(self, request: Request) -> HTMLResponse:
        openapi, assets = self._urls(request)
        return get_redoc_html(
            openapi_url=openapi,
            title=f"{self.title} - ReDoc",
            redoc_js_url=f"{assets}/redoc.standalone.js",
            redoc_favicon_url=f"{assets}/favicon.png",
            with_google_fonts=False,
        )

    def openapi(self) -> dict[str, Any]:
        if not self.openapi_schema:
            self.openapi_schema = describe(self, super().openapi())
        return self.openapi_schema
