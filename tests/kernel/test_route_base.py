"""The route base (api/routebase.py): FastAPI's own handler, given one `StrictJsonRequest` per
request, with a repeated JSON key refused before the route's `wrap` work, and the body kept for
a run of the handler again (a write that lost a race)."""

from __future__ import annotations

from typing import Annotated, Any

import httpx
import pytest
from fastapi import APIRouter, Depends, FastAPI, Request
from pydantic import BaseModel

from multibank.api.jsonbody import DuplicateKey, StrictJsonRequest
from multibank.api.routebase import Handler, WrappedRoute
from multibank.kernel.wire import PLAIN_BODY


class Body(BaseModel):
    name: str
    n: int = 0


SEEN: list[Any] = []


async def reader(request: Request) -> Any:
    """A dependency that reads the body again, as idempotency and rate limits do."""
    try:
        body = await request.json()
    except ValueError as e:  # as `api.limits.body_email`: the body's validation answers it
        body = type(e)
    SEEN.append((type(request), body, PLAIN_BODY.get()))
    return request


class TwiceRoute(WrappedRoute):
    """Runs the handler twice, as a write that lost a race runs again; counts its runs."""

    runs = 0

    def wrap(self, handler: Handler) -> Handler:
        async def run(request: Request) -> Any:
            TwiceRoute.runs += 1
            await handler(request)
            return await handler(request)

        return run


def app_with(route_class: type[WrappedRoute]) -> FastAPI:
    router = APIRouter(route_class=route_class)

    @router.post("/things")
    async def create(body: Body, seen: Annotated[Any, Depends(reader)]) -> dict[str, Any]:
        return {"name": body.name, "n": body.n, "same": seen is not None}

    @router.post("/bare")
    async def bare(seen: Annotated[Any, Depends(reader)]) -> dict[str, str]:
        return {"ok": "yes"}

    app = FastAPI()
    app.include_router(router)
    return app


async def post(app: FastAPI, url: str, content: bytes, content_type: str | None) -> httpx.Response:
    headers = {"content-type": content_type} if content_type else {}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://t"
    ) as client:
        return await client.post(url, content=content, headers=headers)


@pytest.fixture(autouse=True)
def _clean() -> None:
    SEEN.clear()
    TwiceRoute.runs = 0


async def test_a_repeated_key_is_refused_before_the_wrapped_work() -> None:
    r = await post(
        app_with(TwiceRoute), "/things", b'{"name": "a", "name": "b"}', "application/json"
    )
    assert r.status_code == 422  # FastAPI's default handler of RequestValidationError
    assert r.json()["detail"][0]["type"] == "json_duplicate_key"
    assert r.json()["detail"][0]["loc"] == ["body", "name"]
    assert TwiceRoute.runs == 0 and SEEN == []


async def test_a_repeated_key_in_a_json_subtype_is_refused_too() -> None:
    r = await post(
        app_with(WrappedRoute), "/things", b'{"name": "a", "name": "b"}', "application/x+json"
    )
    assert r.json()["detail"][0]["type"] == "json_duplicate_key"


async def test_a_body_that_is_not_json_is_left_to_fastapi() -> None:
    # Not JSON by its content type: FastAPI's handler validates the bytes (a 422 of its own).
    r = await post(app_with(WrappedRoute), "/things", b'{"name": "a", "name": "b"}', "text/plain")
    assert r.status_code == 422
    assert r.json()["detail"][0]["type"] != "json_duplicate_key"
    # Malformed JSON: FastAPI's own json_invalid answer.
    r = await post(app_with(WrappedRoute), "/things", b'{"name": ', "application/json")
    assert r.json()["detail"][0]["type"] == "json_invalid"


async def test_every_run_of_the_handler_reads_the_same_body_through_one_strict_request() -> None:
    r = await post(app_with(TwiceRoute), "/things", b'{"name": "a", "n": 2}', "application/json")
    assert r.status_code == 200, r.text
    assert r.json() == {"name": "a", "n": 2, "same": True}
    assert TwiceRoute.runs == 1
    # Both runs: the dependency got the strict request and the decoded body, under PLAIN_BODY
    # (plain ASCII text without a float).
    assert [(StrictJsonRequest, {"name": "a", "n": 2}, True)] * 2 == SEEN


async def test_a_body_that_is_not_plain_is_validated_with_the_walks() -> None:
    r = await post(
        app_with(WrappedRoute), "/things", b'{"name": "\\u00e9", "n": 2.0}', "application/json"
    )
    assert r.status_code == 200, r.text
    assert [(StrictJsonRequest, {"name": "é", "n": 2.0}, False)] == SEEN


async def test_a_route_without_a_body_field_still_gets_a_strict_request() -> None:
    r = await post(app_with(WrappedRoute), "/bare", b'{"a": 1}', "application/json")
    assert r.status_code == 200
    assert [(StrictJsonRequest, {"a": 1}, False)] == SEEN
    # The route declares no body, so nothing decodes it before the endpoint: a dependency that
    # does meets the strict parse.
    SEEN.clear()
    r = await post(app_with(WrappedRoute), "/bare", b'{"a": 1, "a": 2}', "application/json")
    assert r.status_code == 200
    assert [(StrictJsonRequest, DuplicateKey, False)] == SEEN
