"""The base of the server's route classes: FastAPI's own request handler, with the request's
JSON body read strictly (api/jsonbody.py) and a `wrap` hook for a subclass's work around it.

It stands on FastAPI's documented extension point, a custom `APIRoute` whose
`get_route_handler()` wraps the framework's handler ("Custom Request and APIRoute class" in
FastAPI's documentation): the handler is given a `StrictJsonRequest` made from the request's
scope and receive channel, as the documentation's `GzipRequest` is. Every dependency that
declares a `Request` gets that same object, so the body is read and decoded once per request
however many of them ask (idempotency, rate limits), and a retried write (api/routing.py)
reads it again from the same object.
"""

from __future__ import annotations

import email.message
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import params
from fastapi.datastructures import DefaultPlaceholder
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response

from multibank.api.jsonbody import DuplicateKey, StrictJsonRequest, duplicate_key_error
from multibank.kernel.wire import PLAIN_BODY, plain_json

Handler = Callable[[Request], Coroutine[Any, Any, Response]]

_JSON_TYPES: dict[str, bool] = {}


def is_json(content_type: str) -> bool:
    """FastAPI's test of a JSON content type (`application/json` or `application/*+json`, as its
    request handler parses the header), remembered per header value."""
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


def strict_json(handler: Handler, json_body: bool, strict_content_type: bool) -> Handler:
    """`handler` called with a `StrictJsonRequest`. `json_body`: the route declares a JSON body,
    which FastAPI's handler decodes when the content type says JSON (or says nothing and the
    route is not `strict_content_type`); it is decoded here first, so a key repeated in an object
    is the 400 of `jsonbody.duplicate_key_error`. Anything else wrong with the body (malformed
    JSON, bad encoding) is left for FastAPI's handler to meet again and answer as it does. A
    decoded body that is plain JSON text (`wire.plain_json`) is handled under `PLAIN_BODY`."""

    async def handle(request: Request) -> Response:
        strict = StrictJsonRequest(request.scope, request.receive)
        plain = False
        if json_body:
            try:
                body = await strict.body()
                content_type = strict.headers.get("content-type")
                if body and (is_json(content_type) if content_type else not strict_content_type):
                    await strict.json()
                    plain = plain_json(body)
            except DuplicateKey as e:
                raise duplicate_key_error(e) from None
            except Exception:  # FastAPI's handler meets it again and answers as it does
                pass
        if not plain:
            return await handler(strict)
        checked = PLAIN_BODY.set(True)
        try:
            return await handler(strict)
        finally:
            PLAIN_BODY.reset(checked)

    return handle


class WrappedRoute(APIRoute):
    """A route answered by FastAPI's handler with strict JSON bodies; `wrap` lets a subclass put
    its own work around that handler (`api.routing.UnitOfWorkRoute`: the request's transaction).
    The body is decoded before `wrap`'s work begins: a refused body opens no transaction."""

    def get_route_handler(self) -> Handler:
        body_field = self.body_field
        json_body = body_field is not None and not isinstance(body_field.field_info, params.Form)
        strict = self.strict_content_type
        strict_content_type = strict.value if isinstance(strict, DefaultPlaceholder) else strict
        return strict_json(
            self.wrap(super().get_route_handler()), json_body, bool(strict_content_type)
        )

    def wrap(self, handler: Handler) -> Handler:
        return handler
