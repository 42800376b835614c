"""JSON request bodies read strictly (D11b): a key that appears twice in one object is refused,
where a lenient parser keeps the last value. A proxy or a reviewer that validated the first
value (`"amount": 100, "amount": 999`) would otherwise see another request than the server.

Every body the server decodes goes through `loads`: every route's handler is given a
`StrictJsonRequest` (api/routebase.py), whose `json()` is this parse, kept for FastAPI's body
validation and for the dependencies that read the body again (idempotency, rate limits); a body
the route declares is decoded before anything else runs, so a repeated key is its 400."""

from __future__ import annotations

import json
from typing import Any

from fastapi.exceptions import RequestValidationError
from starlette.requests import Request


class DuplicateKey(ValueError):
    """A key appears more than once in one object of the body; `path` names it (its object's
    keys and list indices from the top, then the key)."""

    def __init__(self, path: tuple[str | int, ...]) -> None:
        super().__init__(f"duplicate key {path!r}")
        self.path = path


class _Repeated(Exception):
    pass


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise _Repeated
    return obj


# Made once: `json.loads(..., object_pairs_hook=...)` makes a decoder per call, which cost more
# than the parse of a small body. With the hook, a typical body costs about what it did.
_DECODER = json.JSONDecoder(object_pairs_hook=_unique)


class _Pairs(list[tuple[str, Any]]):
    """An object as its key-value pairs, duplicates and all (`_repeated_key`)."""


def _repeated_key(text: str) -> tuple[str | int, ...]:
    """Where the first repeated key is: the body is decoded again keeping every pair (only a
    refused body pays for it), then walked without recursion, objects' keys first."""
    pending: list[tuple[Any, tuple[str | int, ...]]] = [
        (json.JSONDecoder(object_pairs_hook=_Pairs).decode(text), ())
    ]
    while pending:
        node, path = pending.pop()
        if isinstance(node, _Pairs):
            seen: set[str] = set()
            for key, _ in node:
                if key in seen:
                    return (*path, key)
                seen.add(key)
            pending.extend(((value, (*path, key)) for key, value in reversed(node)))
        elif isinstance(node, list):
            pending.extend(((value, (*path, i)) for i, value in reversed(list(enumerate(node)))))
    raise AssertionError("no repeated key")  # the strict parse found one


def loads(body: bytes) -> Any:
    """`json.loads(body)` as Starlette calls it (UTF-8, -16 or -32, as the bytes say), except
    that a repeated key raises `DuplicateKey`; malformed JSON raises `json.JSONDecodeError`."""
    text = body.decode(json.detect_encoding(body), "surrogatepass")
    try:
        return _DECODER.decode(text)
    except _Repeated:
        raise DuplicateKey(_repeated_key(text)) from None


def duplicate_key_error(exc: DuplicateKey) -> RequestValidationError:
    """The 400 of a repeated key: the shape of a malformed body's (api/errors.py)."""
    return RequestValidationError(
        [
            {
                "type": "json_duplicate_key",
                "loc": ("body", *exc.path),
                "msg": "JSON duplicate key",
                "input": {},
            }
        ]
    )


class StrictJsonRequest(Request):
    """A request whose `json()` is `loads`, decoded once however many readers ask."""

    decoded: Any = None
    has_decoded = False

    async def json(self) -> Any:
        if not self.has_decoded:
            self.decoded = loads(await self.body())
            self.has_decoded = True
        return self.decoded
