"""The beneficiary batch webhook (v3.63.md §2.5, D38, D43): `/beneficiaries/batch/watch` on
`PENDING_CHALLENGE`, `FAILED`, `CHALLENGE_COMPLETED` and `CHALLENGE_FAILED`, each beneficiary in
the legacy shape (each `oneOf` branch wrapped in a named key)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from multibank.programmes.context import Ctx
from multibank.webhooks.events import emit, ms, register

if TYPE_CHECKING:
    from multibank.beneficiaries.models import Beneficiary, BeneficiaryBatch

BATCHES = "/beneficiaries/batch/watch"
PATHS = register(BATCHES)


def legacy(b: Beneficiary) -> dict[str, Any]:
    info = b.information
    details = b.details
    if "businessName" in info:
        information: dict[str, Any] = {"businessBeneficiaryType": info}
    else:
        information = {"consumerBeneficiaryType": info}
    if "instrument" in details:
        shaped: dict[str, Any] = {"instrumentDetailsBeneficiary": details}
    else:
        bank = dict(details.get("bankAccountDetails") or {})
        name = info.get("businessName") or info.get("fullName")
        outer = {k: v for k, v in details.items() if k != "bankAccountDetails"}
        scheme = (
            {"sepaBankDetails": bank} if "iban" in bank else {"fasterPaymentsBankDetails": bank}
        )
        shaped = {"bankAccountDetailsBeneficiary": {"beneficiaryName": name, **outer, **scheme}}
    out: dict[str, Any] = {
        "id": str(b.id),
        "trustLevel": "TRUSTED",
        "beneficiaryInformation": information,
        "beneficiaryDetails": shaped,
        "state": b.state,
        # A valid beneficiary's events carry this value (as observed).
        "validationFailure": b.validation_failure or "BENEFICIARY_VALIDATION_FAILURE_UNKNOWN",
    }
    if b.external_refs:
        out["externalRefs"] = b.external_refs
    if b.group:
        out["group"] = b.group
    return out


async def batch(
    ctx: Ctx, row: BeneficiaryBatch, members: Sequence[Beneficiary], event_type: str
) -> None:
    body: dict[str, Any] = {
        "id": str(row.id),
        "operation": row.operation,
        "publishedTimestamp": ms(ctx.now),
        "eventType": event_type,
        "beneficiaries": [legacy(b) for b in members],
    }
    if row.tag:
        body["tag"] = row.tag
    await emit(ctx, BATCHES, event_type, f"beneficiary_batches:{row.id}", body)
