"""The payment webhooks of D16 (money-movement.md §2.2): each state step of a transfer, a send
or an outgoing wire transfer, written in the transaction of the step (`webhooks.events.emit`).
The one place their payloads' shapes are decided."""

from __future__ import annotations

import json
from typing import Any

from multibank.payments.models import OWT, SEND, TRANSFER, Payment
from multibank.programmes.context import Ctx
from multibank.webhooks.events import emit, ms, ref, register, unsigned_money

TRANSFERS = "/transfers/watch"
SENDS = "/send/watch"
OWTS = "/outgoing_wire_transfers/watch"
PATHS = register(TRANSFERS, SENDS, OWTS)


def _instrument(kind: str | None, instrument_id: int | None) -> dict[str, str]:
    return {"type": kind or "managed_accounts", "id": str(instrument_id)}


def _line(p: Payment) -> dict[str, Any]:
    """The 3.63 line's fields (v3.63.md §5.4, D40, D41, D43), when the payment has them."""
    line: dict[str, Any] = {}
    if p.scheduled_at is not None:
        line["scheduledTimestamp"] = str(p.scheduled_at)
    if p.executed_at is not None and p.scheduled_at is not None:
        line["executionTimestamp"] = str(p.executed_at)
    if p.cancellation_reason is not None:
        line["cancellationReason"] = p.cancellation_reason
    if p.validation_outcomes is not None:
        line["validationOutcomes"] = p.validation_outcomes
    if p.beneficiary_id is not None:
        line["beneficiaryId"] = str(p.beneficiary_id)
    if p.linked_account_id is not None:
        line["externalAccountId"] = str(p.linked_account_id)
    return line


def _conflict(p: Payment) -> str:
    """The reference's internal `conflict` code: why a payment did not go through."""
    if p.failure is None:
        return "NO_ERROR"
    return "INSUFFICIENT_FUNDS" if p.failure == "INSUFFICIENT_FUNDS" else "UNDEFINED"


async def payment(ctx: Ctx, p: Payment, event: str | None = None) -> None:
    """The payment's state now: one event per state step (eventType = the state, as observed;
    a send's end other than COMPLETED is eventType FAILED with its state, and a send waiting
    for SCA is eventType PENDING_CHALLENGE with state PENDING)."""
    if p.kind == TRANSFER:
        await emit(
            ctx,
            TRANSFERS,
            p.state,
            f"transfers:{p.id}",
            {
                "eventType": p.state,
                "transfer": {
                    "id": {"type": "transfers", "id": str(p.id)},
                    "profileId": str(p.profile_id),
                    "tag": p.tag or "",
                    "source": _instrument(p.source_type, p.source_id),
                    "destination": _instrument(p.destination_type, p.destination_id),
                    "destinationAmount": unsigned_money(p.currency, p.amount),
                    "state": p.state,
                    "creationTimestamp": ms(p.created_at),
                    "conflict": _conflict(p),
                    **_line(p),
                },
                "publishedTimestamp": ms(ctx.now),
            },
        )
    elif p.kind == SEND:
        if event is None:
            waiting = ("PENDING", "PENDING_CHALLENGE", "COMPLETED", "SCHEDULED", "CANCELLED")
            event = p.state if p.state in waiting else "FAILED"
        await emit(
            ctx,
            SENDS,
            event,
            f"send:{p.id}",
            {
                "eventType": event,
                "send": {
                    "id": {"type": "send", "id": str(p.id)},
                    "profileId": str(p.profile_id),
                    "tag": p.tag or "",
                    "source": _instrument(p.source_type, p.source_id),
                    "destination": _instrument(p.destination_type, p.destination_id),
                    "destinationAmount": unsigned_money(p.currency, p.amount),
                    "transactionAmount": unsigned_money(p.currency, p.amount),
                    "sourceFee": unsigned_money(p.currency, p.fee),
                    "state": p.state,
                    "challengeExemptionReason": p.exemption or "NO_EXEMPTION",
                    "conflict": _conflict(p),
                    "creationTimestamp": ms(p.created_at),
                    **_line(p),
                },
                "publishedTimestamp": ms(ctx.now),
            },
        )
    elif p.kind == OWT:
        await emit(ctx, OWTS, p.state, f"outgoing_wire_transfers:{p.id}", _owt(ctx, p))


def _owt(ctx: Ctx, p: Payment) -> dict[str, Any]:
    b = p.beneficiary or {}
    bank = b.get("bankAccountDetails") or {}
    destination: dict[str, Any] = {"beneficiaryName": b.get("name", "")}
    for ours, theirs in (
        ("address", "beneficiaryAddress"),
        ("bankName", "beneficiaryBankName"),
        ("bankAddress", "beneficiaryBankAddress"),
        ("bankCountry", "beneficiaryBankCountry"),
    ):
        if b.get(ours) is not None:
            value = b[ours]
            destination[theirs] = value if isinstance(value, str) else json.dumps(value)
    if "iban" in bank:
        destination["sepa"] = {"iban": bank["iban"], "bic": bank.get("bankIdentifierCode", "")}
    else:
        destination["fasterPayments"] = {
            "accountNumber": bank.get("accountNumber", ""),
            "sortCode": bank.get("sortCode", ""),
        }
    return {
        "eventType": p.state,
        "owner": ref(p.identity_type, p.identity_id),
        "transfer": {
            "id": {"type": "outgoing_wire_transfers", "id": str(p.id)},
            "profileId": str(p.profile_id),
            "tag": p.tag or "",
            "source": _instrument(p.source_type, p.source_id),
            "transferAmount": unsigned_money(p.currency, p.amount),
            "description": p.description or "",
            "type": p.scheme or "",
            "destination": destination,
            "state": p.state,
            "challengeExemptionReason": p.exemption or "NO_EXEMPTION",
            "creationTimestamp": ms(p.created_at),
            "transactionAmount": unsigned_money(p.currency, p.amount),
            "transactionFee": unsigned_money(p.currency, p.fee),
            "conflict": _conflict(p),
            **_line(p),
        },
        "publishedTimestamp": ms(ctx.now),
    }
