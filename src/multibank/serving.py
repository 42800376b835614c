"""uvicorn's HTTP/1.1 protocol (httptools), with each response leaving in one write.

uvicorn writes a response's head when the application sends `http.response.start` and its body
when it sends `http.response.body`: two system calls, and on a connection with `TCP_NODELAY` (as
asyncio sets) two TCP segments, each of which wakes the client. `CoalescingHttpToolsProtocol`
gives uvicorn a transport whose writes made during one turn of the event loop go out together
at its end: the head and body of an answer, sent one after the other, leave in one `send`
(decision 0027). Everything else is uvicorn's own."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

# A larger write goes out at once (after what is held), not copied into a joined buffer.
_JOIN_AT_MOST = 64 * 1024


class CoalescingTransport:
    """Stands in for a connection's transport: `write` holds the bytes until the end of the
    current turn of the event loop (or a larger write, or `close`), then writes them in one
    call. Everything else is the transport's."""

    __slots__ = ("_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if len(data) > _JOIN_AT_MOST:
            self.flush()
            self._transport.write(data)
            return
        if not self._held:
            self._loop.call_soon(self.flush)
        self._held.append(bytes(data))

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        """Writes what is held, in one call (nothing once the connection is closing)."""
        held, self._held = self._held, []
        if held and not self._transport.is_closing():
            self._transport.write(held[0] if len(held) == 1 else b"".join(held))

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class CoalescingHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol over a `CoalescingTransport` (`multibank serve`)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        coalescing = CoalescingTransport(transport, asyncio.get_running_loop())
        super().connection_made(cast(asyncio.Transport, coalescing))
