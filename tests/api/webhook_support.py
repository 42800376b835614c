"""A real HTTP receiver on 127.0.0.1 for the webhook tests, and signature checks computed here,
independently of the server's code."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> dict[str, Any]:
        out: dict[str, Any] = json.loads(self.body)
        return out

    @property
    def call_ref(self) -> str:
        return self.headers["call-ref"]


@dataclass
class Receiver:
    """Records every POST; answers what `answer(path, n)` says (n: how many times that path was
    posted before), default 204."""

    url: str = ""
    received: list[Received] = field(default_factory=list)
    answer: Callable[[str, int], tuple[int, bytes, dict[str, str]]] = lambda path, n: (204, b"", {})
    # When set, answers instead of `answer`, from the request itself.
    answer_for: Callable[[Received], tuple[int, bytes, dict[str, str]]] | None = None
    delay: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def of(self, path: str) -> list[Received]:
        with self.lock:
            return [r for r in self.received if r.path == path]

    def wait_for(self, count: int, seconds: float = 30) -> list[Received]:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.received) >= count:
                    return list(self.received)
            time.sleep(0.05)
        with self.lock:
            raise AssertionError(f"{len(self.received)} of {count} events arrived")


@contextlib.contextmanager
def receiving() -> Iterator[Receiver]:
    receiver = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            got = Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            with receiver.lock:
                n = sum(1 for r in receiver.received if r.path == self.path)
                receiver.received.append(got)
            if receiver.delay:
                time.sleep(receiver.delay)
            if receiver.answer_for is not None:
                status, payload, headers = receiver.answer_for(got)
            else:
                status, payload, headers = receiver.answer(self.path, n)
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}/hooks"
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()


def signed_by(secret: str, r: Received) -> bool:
    """Both signatures of money-movement.md §2.1, computed here."""
    stamp = r.headers["published-timestamp"]
    key = secret.encode()
    v1 = base64.b64encode(hmac.new(key, stamp.encode(), hashlib.sha256).digest()).decode()
    message = r.headers["call-ref"].encode() + r.body + stamp.encode()
    v2 = base64.b64encode(hmac.new(key, message, hashlib.sha256).digest()).decode()
    return hmac.compare_digest(v1, r.headers["signature"]) and hmac.compare_digest(
        v2, r.headers["signature-v2"]
    )
