"""`multibank serve`'s HTTP protocol writes each answer in one write (decision 0027): the
transport that holds writes until the end of the event loop's turn, and a real uvicorn server
with that protocol answering small, large, streamed and HEAD requests on kept-alive
connections exactly as uvicorn's own does."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx
import uvicorn

from multibank.serving import CoalescingHttpToolsProtocol, CoalescingTransport


class Recorded:
    """An asyncio transport that records what is written to it."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        assert not self.closed
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def write_eof(self) -> None:
        self.writes.append(b"<eof>")

    def get_extra_info(self, name: str) -> Any:
        return f"extra {name}"


async def test_writes_in_one_turn_go_out_in_one_write() -> None:
    inner = Recorded()
    t = CoalescingTransport(inner, asyncio.get_running_loop())  # type: ignore[arg-type]
    t.write(b"HTTP/1.1 200 OK\r\n\r\n")
    t.write(memoryview(b"{}"))
    assert inner.writes == []  # held until the turn ends
    await asyncio.sleep(0)
    assert inner.writes == [b"HTTP/1.1 200 OK\r\n\r\n{}"]
    t.write(b"next")
    await asyncio.sleep(0)
    assert inner.writes[1:] == [b"next"]
    assert t.get_extra_info("peername") == "extra peername"  # the rest is the transport's


async def test_writelines_and_eof_keep_the_order_of_the_bytes() -> None:
    inner = Recorded()
    t = CoalescingTransport(inner, asyncio.get_running_loop())  # type: ignore[arg-type]
    t.write(b"a")
    t.writelines([b"b", b"c"])
    assert inner.writes == []
    t.write_eof()  # what is held goes first
    assert inner.writes == [b"abc", b"<eof>"]


async def test_a_large_write_goes_out_at_once_after_what_is_held() -> None:
    inner = Recorded()
    t = CoalescingTransport(inner, asyncio.get_running_loop())  # type: ignore[arg-type]
    big = b"x" * (200 * 1024)
    t.write(b"head")
    t.write(big)
    assert inner.writes == [b"head", big]
    await asyncio.sleep(0)
    assert inner.writes == [b"head", big]


async def test_close_writes_what_is_held_first_and_a_closed_transport_gets_nothing() -> None:
    inner = Recorded()
    t = CoalescingTransport(inner, asyncio.get_running_loop())  # type: ignore[arg-type]
    t.write(b"last words")
    t.close()
    assert inner.writes == [b"last words"] and inner.closed
    t.write(b"too late")
    await asyncio.sleep(0)
    assert inner.writes == [b"last words"]


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Small, large and streamed answers."""
    if scope["type"] != "http":
        return
    path = scope["path"]
    if path == "/stream":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for part in (b"one,", b"two,", b"three"):
            await send({"type": "http.response.body", "body": part, "more_body": True})
            await asyncio.sleep(0.01)
        await send({"type": "http.response.body", "body": b""})
        return
    body = b"y" * (300 * 1024) if path == "/large" else b'{"ok":true}'
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@contextlib.asynccontextmanager
async def serving() -> AsyncIterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, http=CoalescingHttpToolsProtocol, log_level="warning"
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:  # noqa: ASYNC110 - uvicorn.Server has a flag, no event
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


async def test_a_server_with_the_protocol_answers_as_uvicorn_does() -> None:
    async with serving() as base, httpx.AsyncClient(base_url=base) as c:
        for _ in range(3):  # one kept-alive connection
            r = await c.get("/small")
            assert r.status_code == 200 and r.json() == {"ok": True}
            assert r.headers["content-length"] == "11"
        r = await c.get("/large")
        assert r.status_code == 200 and r.content == b"y" * (300 * 1024)
        r = await c.get("/stream")
        assert r.status_code == 200 and r.content == b"one,two,three"
        r = await c.head("/small")
        assert r.status_code == 200 and r.content == b""
        r = await c.get("/small")
        assert r.json() == {"ok": True}
