"""The lean request handler (api/lean.py) answers exactly as FastAPI's own handler does.

Two applications serve the same endpoints: one with FastAPI's routes, one with routes answered by
the lean handler. Every request below, valid or not, must get the same status, body and
content type from both, so a difference in parsing, validation, errors, defaults, dependency
order or serialisation fails here before it reaches a client.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Annotated, Any

import httpx
import pytest
from fastapi import APIRouter, Body, Depends, FastAPI, Path, Query, Request, Response
from fastapi.routing import APIRoute
from fastapi.security import APIKeyHeader
from pydantic import BaseModel, Field

from multibank.api import lean
from multibank.api.lean import LeanRoute, Unsupported, UntrustworthyResponse, lean_handler, trusted

key_scheme = APIKeyHeader(name="api-key", auto_error=False)
calls: list[str] = []


class Item(BaseModel):
    name: str = Field(min_length=1, max_length=5)
    amount: int = Field(ge=0)
    tags: list[str] = []


class Out(BaseModel):
    name: str
    amount: int
    note: str | None = None


async def caller(request: Request, key: Annotated[str | None, Depends(key_scheme)]) -> str:
    calls.append("caller")
    if key == "boom":
        raise ValueError("refused")
    return key or "anonymous"


async def limited(who: Annotated[str, Depends(caller)]) -> str:
    calls.append("limited")  # `caller` is solved once per request, however many ask
    return who


Who = Annotated[str, Depends(caller)]


def build(route_class: type[APIRoute]) -> FastAPI:
    router = APIRouter(route_class=route_class)

    @router.get("/items/{item_id}", response_model=Out, response_model_exclude_none=True)
    async def get_item(
        item_id: Annotated[str, Path(pattern=r"^[0-9]+$")],
        who: Who,
        verbose: bool = False,
    ) -> dict[str, Any]:
        return {"name": who, "amount": int(item_id), "note": "v" if verbose else None}

    @router.get("/items", dependencies=[Depends(limited)])
    async def list_items(
        who: Who,
        offset: Annotated[int, Query(ge=0)] = 0,
        limit: Annotated[int | None, Query(ge=1, le=100)] = None,
        state: Annotated[list[str] | None, Query(pattern="^(A|B)$")] = None,
        dotted: Annotated[list[str] | None, Query(alias="state.reason")] = None,
        name: Annotated[str | None, Query(min_length=1)] = None,
    ) -> dict[str, Any]:
        return {
            "who": who,
            "offset": offset,
            "limit": limit,
            "state": state,
            "dotted": dotted,
            "name": name,
        }

    @router.post("/items", response_model=Out, status_code=201)
    async def create_item(item: Item, who: Who) -> Out:
        return Out(name=item.name, amount=item.amount, note=who)

    async def checked(item: Item) -> str:
        calls.append(f"checked {item.name}")  # as the login's password check reads the body
        return item.name

    @router.post("/checked", response_model=Out)
    async def create_checked(
        item: Item, name: Annotated[str, Depends(checked)], who: Who
    ) -> dict[str, Any]:
        return {"name": name, "amount": item.amount, "note": who}

    # Bodies validated field by field (FastAPI's embedded fields), not as one whole body.
    @router.post("/pair")
    async def pair(item: Item, other: Item, who: Who) -> dict[str, Any]:
        return {"names": [item.name, other.name], "who": who}

    @router.post("/embedded")
    async def embedded(item: Annotated[Item, Body(embed=True)]) -> dict[str, Any]:
        return {"name": item.name}

    @router.post("/empty", status_code=204, response_class=Response)
    async def empty(who: Who) -> None:
        return None

    @router.get("/raw")
    async def raw() -> Response:
        return Response(b"raw", media_type="text/plain", headers={"x-raw": "1"})

    app = FastAPI()
    app.router.routes.extend(router.routes)  # as the version applications add theirs
    assert all(getattr(r, "lean", True) for r in router.routes) or route_class is APIRoute

    @app.exception_handler(ValueError)
    async def refused(request: Request, exc: ValueError) -> Response:
        return Response(str(exc), status_code=418)

    return app


REQUESTS: list[tuple[str, str, dict[str, Any]]] = [
    ("GET", "/items/12", {}),
    ("GET", "/items/12?verbose=true", {"headers": {"api-key": "k"}}),
    ("GET", "/items/12?verbose=maybe", {}),
    ("GET", "/items/x1", {}),
    ("GET", "/items/x1?verbose=maybe", {"headers": {"api-key": "boom"}}),
    ("GET", "/items", {}),
    ("GET", "/items?offset=3&limit=10&state=A&state=B&state.reason=x&state.reason=y", {}),
    ("GET", "/items?offset=-1&limit=0&state=C&name=", {}),
    ("GET", "/items?limit=abc&limit=5", {}),
    ("GET", "/items?state=", {}),
    ("POST", "/items", {"json": {"name": "ab", "amount": 3, "tags": ["t"]}}),
    ("POST", "/items", {"json": {"name": "", "amount": -1}}),
    ("POST", "/items", {"json": {"amount": "x"}}),
    ("POST", "/items", {"json": [1, 2]}),
    ("POST", "/items", {}),
    ("POST", "/items", {"content": b"{not json", "headers": {"content-type": "application/json"}}),
    ("POST", "/items", {"content": b'{"name": "a", "amount": 1}'}),
    (
        "POST",
        "/items",
        {"content": b'{"name": "a", "amount": 1}', "headers": {"content-type": "text/plain"}},
    ),
    (
        "POST",
        "/items",
        {
            "content": b'{"name": "a", "amount": 1}',
            "headers": {"content-type": "application/x+json"},
        },
    ),
    ("POST", "/items", {"json": {"name": "a", "amount": 1}, "headers": {"api-key": "boom"}}),
    ("POST", "/checked", {"json": {"name": "ab", "amount": 3}}),
    ("POST", "/checked", {"json": {"name": "", "amount": -1}}),
    ("POST", "/checked", {"json": {"name": "abcdefg"}}),
    ("POST", "/checked", {}),
    ("POST", "/pair", {"json": {"item": {"name": "ab", "amount": 1}, "other": {"name": "c"}}}),
    ("POST", "/pair", {"json": {"item": {"name": "ab", "amount": 1}}}),
    ("POST", "/pair", {"json": {"name": "ab", "amount": 1}}),
    ("POST", "/pair", {"json": [1]}),
    ("POST", "/embedded", {"json": {"item": {"name": "ab", "amount": 1}}}),
    ("POST", "/embedded", {"json": {"name": "ab", "amount": 1}}),
    ("POST", "/embedded", {}),
    ("POST", "/empty", {}),
    ("GET", "/raw", {}),
]


async def answer(app: FastAPI, method: str, url: str, kwargs: dict[str, Any]) -> tuple[Any, ...]:
    calls.clear()
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        r = await client.request(method, url, **kwargs)
    return r.status_code, r.headers.get("content-type"), r.headers.get("x-raw"), r.content, calls[:]


@pytest.mark.parametrize(("method", "url", "kwargs"), REQUESTS)
async def test_lean_answers_as_fastapi(method: str, url: str, kwargs: dict[str, Any]) -> None:
    expected = await answer(build(APIRoute), method, url, kwargs)
    got = await answer(build(LeanRoute), method, url, kwargs)
    assert got == expected


async def test_an_included_router_keeps_what_its_inclusion_adds() -> None:
    """`include_router` may add dependencies (the portal's admin check is one) and overrides:
    such routes keep FastAPI's handler, which knows of them."""
    router = APIRouter(route_class=LeanRoute)

    @router.get("/open")
    async def open_() -> dict[str, str]:
        return {"open": "yes"}

    async def refuse() -> None:
        raise ValueError("refused by the inclusion")

    app = build(LeanRoute)
    app.include_router(router, prefix="/in", dependencies=[Depends(refuse)])
    status, _, _, body, _ = await answer(app, "GET", "/in/open", {})
    assert (status, body) == (418, b"refused by the inclusion")

    async def stand_in() -> None:
        return None

    app.dependency_overrides[refuse] = stand_in
    status, _, _, body, _ = await answer(app, "GET", "/in/open", {})
    assert (status, body) == (200, b'{"open":"yes"}')


def test_what_the_lean_handler_does_not_do_is_left_to_fastapi() -> None:
    router = APIRouter()

    @router.get("/with-response")
    async def with_response(response: Response) -> dict[str, str]:
        return {}

    route = router.routes[-1]
    assert isinstance(route, APIRoute)
    with pytest.raises(Unsupported):
        lean_handler(route)


# Trusted answers (decision 0022): dumped as built, checked against the model in the tests.


def trusted_app() -> FastAPI:
    router = APIRouter(route_class=LeanRoute)

    @router.get("/good", response_model=Out, response_model_exclude_none=True)
    @trusted
    async def good() -> dict[str, Any]:
        return {"name": "a", "amount": 1}

    @router.get("/checked", response_model=Out, response_model_exclude_none=True)
    async def checked() -> dict[str, Any]:
        return {"name": "a", "amount": 1, "note": None}

    @router.get("/with-none", response_model=Out, response_model_exclude_none=True)
    @trusted
    async def with_none() -> dict[str, Any]:
        return {"name": "a", "amount": 1, "note": None}  # the model leaves `note` out

    @router.get("/out-of-order", response_model=Out, response_model_exclude_none=True)
    @trusted
    async def out_of_order() -> dict[str, Any]:
        return {"amount": 1, "name": "a"}

    @router.get("/wrong-type", response_model=Out, response_model_exclude_none=True)
    @trusted
    async def wrong_type() -> dict[str, Any]:
        return {"name": "a", "amount": "1"}  # validation would make it a number

    app = FastAPI()
    app.include_router(router)
    app.router.routes = router.routes  # served by the routes themselves (not re-included)
    return app


@contextlib.asynccontextmanager
async def trusted_client(
    monkeypatch: pytest.MonkeyPatch, check: bool
) -> AsyncIterator[httpx.AsyncClient]:
    monkeypatch.setattr(lean, "CHECK_TRUSTED", check)
    transport = httpx.ASGITransport(app=trusted_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        yield c


async def test_a_trusted_answer_is_the_bytes_the_model_would_give(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with trusted_client(monkeypatch, check=True) as c:
        good, checked = await c.get("/good"), await c.get("/checked")
        assert good.status_code == 200
        assert good.content == checked.content == b'{"name":"a","amount":1}'
        assert good.headers["content-type"] == checked.headers["content-type"]
        for path in ("/with-none", "/out-of-order", "/wrong-type"):
            with pytest.raises(UntrustworthyResponse):
                await c.get(path)


async def test_without_the_check_a_trusted_answer_is_not_validated(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the check is for: in service the body goes out as built."""
    async with trusted_client(monkeypatch, check=False) as c:
        assert (await c.get("/with-none")).content == b'{"name":"a","amount":1,"note":null}'


def _request(messages: list[dict[str, Any]]) -> Request:
    pending = list(messages)

    async def receive() -> dict[str, Any]:
        # Once its messages are read, as a server says of a client gone.
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    return Request({"type": "http", "method": "POST", "headers": []}, receive)


async def _outcome(read: Any, messages: list[dict[str, Any]]) -> tuple[Any, ...]:
    """What reading the body twice gives (or raises), and what the request says after."""
    request = _request(messages)
    try:
        first = await read(request)
    except Exception as error:  # as Starlette raises it
        first = type(error).__name__
    try:
        again = await read(request)
    except Exception as error:
        again = type(error).__name__
    return first, again, request._stream_consumed, request._is_disconnected


@pytest.mark.parametrize(
    "messages",
    [
        [{"type": "http.request", "body": b'{"a": 1}'}],
        [{"type": "http.request", "body": b""}],
        [{"type": "http.request"}],
        [
            {"type": "http.request", "body": b'{"a": ', "more_body": True},
            {"type": "http.request", "body": b"", "more_body": True},
            {"type": "http.request", "body": b"1}", "more_body": False},
        ],
        [{"type": "http.request", "body": b"{", "more_body": True}, {"type": "http.disconnect"}],
        [{"type": "http.disconnect"}],
    ],
)
async def test_the_lean_body_is_starlettes(messages: list[dict[str, Any]]) -> None:
    """`lean.read_body` reads the same messages to the same body, or the same error, and leaves
    the request as Starlette's `Request.body()` does (decision 0034)."""

    async def starlette_body(request: Request) -> bytes:
        return await request.body()

    ours = await _outcome(lean.read_body, messages)
    assert ours == await _outcome(starlette_body, messages)
    request = _request(messages)
    if isinstance(ours[0], bytes):  # what Starlette's body() and json() find afterwards
        assert await lean.read_body(request) == await request.body() == ours[0]


async def test_a_query_string_sent_again_answers_as_the_first_time() -> None:
    """Parsed query strings are kept by their bytes (`lean.query_params`): the same string
    gives the same values every time, another string its own, a long one is parsed and not
    kept, and only so many are kept."""
    app = build(LeanRoute)
    lean._QUERIES.clear()
    first = await answer(app, "GET", "/items?limit=2&state.reason=x&state.reason=y", {})
    other = await answer(app, "GET", "/items?limit=3&offset=1&name=n", {})
    again = await answer(app, "GET", "/items?limit=2&state.reason=x&state.reason=y", {})
    assert first == again != other
    assert first[0] == other[0] == 200
    assert b'"dotted":["x","y"]' in first[3] and b'"offset":1' in other[3]
    assert set(lean._QUERIES) == {
        b"limit=2&state.reason=x&state.reason=y",
        b"limit=3&offset=1&name=n",
    }
    long = "&".join(["state.reason=x"] * 20)  # 299 bytes
    reference = await answer(build(APIRoute), "GET", f"/items?{long}", {})
    assert await answer(app, "GET", f"/items?{long}", {}) == reference
    assert long.encode() not in lean._QUERIES
    for n in range(lean._QUERIES_KEPT + 1):
        await answer(app, "GET", f"/items?offset={n}", {})
    assert 0 < len(lean._QUERIES) <= lean._QUERIES_KEPT
