"""Schemathesis hooks for the conformance run (loaded through SCHEMATHESIS_HOOKS).

The banking API needs two headers at once (`api-key` and `Authorization`), and schemathesis,
when it leaves out the one a scenario is about, drops the other too; the server then rightly
answers 400 for the missing api-key where schemathesis expects 401 for the missing token. The
api-key is put back unless the scenario is about the api-key itself (and the simulator's
`programme-key` when the scenario is about the Bearer token of its secure session).

A client sends a new `idempotency-ref` with each new request; schemathesis draws the same few
values again and again, and the server rightly refuses a ref reused with another payload (400,
D6). Each request gets a fresh ref; one drawn too long (over 255 characters) stays as long.
"""

from __future__ import annotations

import os
import secrets
from typing import Any

import schemathesis


def _left_out(case: Any) -> str:
    data = getattr(getattr(getattr(case, "meta", None), "phase", None), "data", None)
    scenario = str(getattr(data, "scenario", ""))
    if "MISSING_PARAMETER" not in scenario.upper():
        return ""
    return str(getattr(data, "parameter", "") or "").lower()


def _about_programme_key(case: Any) -> bool:
    """Whether the case leaves out or breaks the `programme-key` header on purpose."""
    data = getattr(getattr(getattr(case, "meta", None), "phase", None), "data", None)
    said = f"{getattr(data, 'parameter', '')} {getattr(data, 'description', '')}".lower()
    return _left_out(case) == "programme-key" or "programme-key" in said


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: dict[str, Any]) -> None:
    fresh = secrets.token_hex(16)
    if case.headers is None:
        case.headers = {}
    headers = case.headers
    key = os.environ.get("MB_API_KEY", "")
    if os.environ.get("MB_SEND_API_KEY") and key and _left_out(case) != "api-key":
        # Whatever schemathesis drew for it: the programme's key.
        for name in [h for h in headers if h.lower() == "api-key"]:
            del headers[name]
        headers["api-key"] = key
    elif not os.environ.get("MB_SEND_API_KEY") and key and not _about_programme_key(case):
        # The simulator's secure session takes `programme-key` and, as a second security
        # alternative, the owner's Bearer token. A case drawn about that token (missing, or of
        # another format) lost the key with it, and a mutation that failed to break the token's
        # format is then judged as valid data refused: the case keeps the programme's key, as
        # the banking API's keeps its api-key, unless it is about the key itself.
        for name in [h for h in headers if h.lower() == "programme-key"]:
            del headers[name]
        headers["programme-key"] = key
    for name in list(headers):
        value = headers[name]
        if name.lower() == "idempotency-ref" and isinstance(value, str) and value:
            headers[name] = fresh if len(value) <= 255 else (fresh * 9)[: len(value)]
