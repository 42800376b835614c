"""Password rules of the interface (SensitivePassword) and their 409 error codes."""

from __future__ import annotations

import re

from multibank.kernel.errors import Conflict

MIN_LENGTH = 8
MAX_LENGTH = 30
_CLASSES = (
    re.compile(r"[a-z]"),
    re.compile(r"[A-Z]"),
    re.compile(r"[0-9]"),
    re.compile(r"[^A-Za-z0-9]"),
)


def complexity_error(value: str) -> str | None:
    """The errorCode a password breaks, or None: 8 to 30 characters with a lower-case letter,
    an upper-case letter, a digit and a special character."""
    if len(value) < MIN_LENGTH:
        return "PASSWORD_TOO_SHORT"
    if len(value) > MAX_LENGTH:
        return "PASSWORD_TOO_LONG"
    if not all(c.search(value) for c in _CLASSES):
        return "PASSWORD_TOO_SIMPLE"
    return None


def check_complexity(value: str) -> None:
    error = complexity_error(value)
    if error is not None:
        raise Conflict(error)
