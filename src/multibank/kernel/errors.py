"""Typed failures carrying their HTTP status and wire body: no expected failure becomes a 500."""

from __future__ import annotations

from typing import Any


class DomainError(Exception):
    status_code: int = 500
    # Set when the refusal itself must be remembered (a wrong code's try, a failed login):
    # the request's changes are committed although the answer is an error.
    keep_changes: bool = False
    # Set when the refusal is the operation's answer for its idempotency-ref: a wire transfer
    # refused yet stored as INVALID took the ref, so a retry replays the refusal (D12).
    store_answer: bool = False

    def keeping_changes(self) -> DomainError:
        self.keep_changes = True
        return self

    def storing_answer(self) -> DomainError:
        self.store_answer = True
        return self

    def body(self) -> dict[str, Any] | None:
        return None

    def headers(self) -> dict[str, str]:
        return {}


class Conflict(DomainError):
    """409 `{errorCode}`: a business rule refused the request; nothing changed."""

    status_code = 409

    def __init__(self, error_code: str, message: str | None = None) -> None:
        super().__init__(error_code)
        self.error_code = error_code
        self.message = message

    def body(self) -> dict[str, Any]:
        if self.message:
            return {"errorCode": self.error_code, "message": self.message}
        return {"errorCode": self.error_code}


class NotFound(DomainError):
    status_code = 404

    def __init__(self, message: str = "Not found") -> None:
        super().__init__(message)
        self.message = message

    def body(self) -> dict[str, Any]:
        return {"code": "NOT_FOUND", "message": self.message}


class Unauthorized(DomainError):
    """401 with no body: bad api-key, or a missing, bad, expired or ended token."""

    status_code = 401


class Forbidden(DomainError):
    status_code = 403

    def __init__(self, error_code: str | None = None, message: str | None = None) -> None:
        super().__init__(error_code or "forbidden")
        self.error_code = error_code
        self.message = message

    def body(self) -> dict[str, Any] | None:
        if self.error_code is None:
            return None
        out: dict[str, Any] = {"errorCode": self.error_code}
        if self.message:
            out["message"] = self.message
        return out


class Locked(DomainError):
    status_code = 423


class BadRequest(DomainError):
    """400 `{message, syntaxErrors}`."""

    status_code = 400

    def __init__(self, message: str, invalid_fields: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.invalid_fields = invalid_fields or []

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {"message": self.message[:255]}
        if self.invalid_fields:
            out["syntaxErrors"] = {"invalidFields": self.invalid_fields}
        return out


class PayloadTooLarge(DomainError):
    status_code = 413

    def __init__(self, message: str = "Request entity too large") -> None:
        super().__init__(message)
        self.message = message

    def body(self) -> dict[str, Any]:
        return {"message": self.message}


class TooManyRequests(DomainError):
    status_code = 429

    def __init__(self, limit_header: str, reset_seconds: int) -> None:
        super().__init__("rate limited")
        self.limit_header = limit_header
        self.reset_seconds = max(0, reset_seconds)

    def headers(self) -> dict[str, str]:
        return {
            "x-ratelimit-limit": self.limit_header,
            "x-ratelimit-reset": str(self.reset_seconds),
        }
