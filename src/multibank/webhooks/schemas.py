"""What the operator API answers about webhook deliveries (D16)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel


class AttemptRead(BaseModel):
    attemptedAt: int
    url: str
    outcome: Literal["DELIVERED", "RETRY", "FAILED"]
    statusCode: int | None
    error: str | None
    responseExcerpt: str | None  # the first 200 characters of the answer, never more
    durationMs: int


class DeliveryRead(BaseModel):
    id: str
    eventType: str  # "managed_accounts.CREATED"
    path: str  # "/managed_accounts/watch"
    resource: str
    callRef: str
    state: Literal["PENDING", "DELIVERED", "FAILED"]
    attemptCount: int
    nextAttemptAt: int | None
    createdAt: int
    deliveredAt: int | None
    lastStatusCode: int | None
    lastError: str | None
    payload: dict[str, Any]
    attempts: list[AttemptRead]


class DeliveriesPage(BaseModel):
    deliveries: list[DeliveryRead]
    count: int
    responseCount: int


class WebhookSecretRead(BaseModel):
    webhookSecret: str
