"""Trusted beneficiaries on the 3.63 line (v3.63.md §2, D38): batches to add and remove them,
each confirmed by one challenge, and their reads (`beneficiaries.service`)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path, Query, Response

from multibank.api.deps import CallerIdempotent, LoggedIn, conflicts
from multibank.api.limits import CallerCodeSendLimited, CallerCodeVerifyLimited
from multibank.api.openapi import not_found
from multibank.api.routing import UnitOfWorkRouter
from multibank.beneficiaries import service
from multibank.beneficiaries.models import Beneficiary, BeneficiaryBatch
from multibank.beneficiaries.schemas import (
    BATCH_STATES,
    BeneficiariesPage,
    BeneficiaryBatchCreate,
    BeneficiaryBatchesPage,
    BeneficiaryBatchRead,
    BeneficiaryRead,
    BeneficiaryRemove,
)
from multibank.factors.schemas import SCAOtpChannel, SCAPushChannel
from multibank.kernel.vocabulary import Tag
from multibank.payments.schemas import VerificationCodeBody

router = UnitOfWorkRouter(tags=["Beneficiaries"])
Id = Annotated[str, Path(pattern=r"^[0-9]+$", max_length=19)]
Offset = Annotated[int, Query(ge=0, le=2**31 - 1)]
Limit = Annotated[int, Query(ge=1, le=100)]
Many = Annotated[list[Annotated[str, Query(pattern=r"^[0-9]+$", max_length=19)]] | None, Query()]
START = ("STATE_INVALID", "CHANNEL_NOT_SUPPORTED", "CHANNEL_NOT_REGISTERED")
VERIFY = (
    *START,
    "VERIFICATION_CODE_EXPIRED",
    "VERIFICATION_CODE_INVALID",
    "ONE_CHALLENGE_LIMIT_REMAINING",
    "CHALLENGE_LIMIT_EXCEEDED",
)


def batch_body(batch: BeneficiaryBatch, state: str | None = None) -> dict[str, Any]:
    return {
        "operationBatchId": {"batchId": str(batch.id), "operation": batch.operation},
        "tag": batch.tag,
        "state": state or batch.state,
    }


def beneficiary_body(b: Beneficiary) -> dict[str, Any]:
    return {
        "id": str(b.id),
        "relatedOperationBatches": b.batches,
        "state": b.state,
        "validationFailure": b.validation_failure,
        "trustLevel": "TRUSTED",
        "externalRefs": b.external_refs,
        "group": b.group,
        "beneficiaryInformation": b.information,
        "beneficiaryDetails": b.details,
    }


def page_of(key: str, total: int, items: list[dict[str, Any]]) -> dict[str, Any]:
    return {key: items, "count": total, "responseCount": len(items)}


@router.post(
    "/beneficiaries",
    operation_id="beneficiaryBatchCreate",
    response_model=BeneficiaryBatchRead,
    response_model_exclude_none=True,
    dependencies=[CallerIdempotent],
    responses=conflicts("MODEL_CONSTRAINTS_VIOLATED"),
)
async def batch_create(body: BeneficiaryBatchCreate, session: LoggedIn) -> dict[str, Any]:
    """Adds trusted beneficiaries in one batch, validated now: each is `PENDING_CHALLENGE`, or
    `INVALID` with its `validationFailure` (an instrument not this programme's, destroyed, the
    caller's own, or whose owner's name is not the one sent; details the identity has already
    waiting or active). The answer is `INITIALISED`; the batch then reads `PENDING_CHALLENGE`
    (one valid at least: start its challenge) or `FAILED`."""
    batch = await service.create(session.ctx, session.auth.identity_id, body)
    return batch_body(batch, "INITIALISED")


@router.get(
    "/beneficiaries",
    operation_id="beneficiariesGet",
    response_model=BeneficiariesPage,
    response_model_exclude_none=True,
)
async def beneficiaries_get(
    session: LoggedIn,
    offset: Offset = 0,
    limit: Limit = 100,
    batchId: Many = None,
    group: Annotated[list[str] | None, Query()] = None,
) -> dict[str, Any]:
    """The identity's beneficiaries, newest first; `batchId` and `group` keep those of these
    batches or groups."""
    total, rows = await service.page(
        session.ctx,
        session.auth.identity_id,
        service.Page(offset, limit),
        batchId or (),
        group or (),
    )
    return page_of("beneficiaries", total, [beneficiary_body(b) for b in rows])


@router.post(
    "/beneficiaries/remove",
    operation_id="beneficiaryBatchRemove",
    response_model=BeneficiaryBatchRead,
    response_model_exclude_none=True,
    dependencies=[CallerIdempotent],
    responses=not_found("none of the ids is an ACTIVE beneficiary of the identity"),
)
async def batch_remove(body: BeneficiaryRemove, session: LoggedIn) -> dict[str, Any]:
    """Removes the `ACTIVE` beneficiaries named, in one batch that waits for its challenge
    (`PENDING_CHALLENGE`); the others are left as they are, and none `ACTIVE` is 404."""
    batch = await service.remove(session.ctx, session.auth.identity_id, body.beneficiaryIds)
    return batch_body(batch)


@router.get(
    "/beneficiaries/batch",
    operation_id="beneficiaryBatchesGet",
    response_model=BeneficiaryBatchesPage,
    response_model_exclude_none=True,
)
async def batches_get(
    session: LoggedIn,
    offset: Offset = 0,
    limit: Limit = 100,
    state: Annotated[list[str] | None, Query()] = None,
    operation: Annotated[list[str] | None, Query()] = None,
    tag: Annotated[list[Tag] | None, Query()] = None,
) -> dict[str, Any]:
    """The identity's beneficiary batches, newest first; `state`, `operation` and `tag` keep
    those in these states, of these operations, with these tags."""
    total, rows = await service.batches(
        session.ctx,
        session.auth.identity_id,
        service.Page(offset, limit),
        [s for s in state or () if s in BATCH_STATES],
        operation or (),
        tag or (),
    )
    return page_of("batches", total, [batch_body(b) for b in rows])


@router.get(
    "/beneficiaries/batch/{id}",
    operation_id="beneficiaryBatchGet",
    response_model=BeneficiaryBatchRead,
    response_model_exclude_none=True,
    responses=not_found("no batch of the identity has this id"),
)
async def batch_get(id: Id, session: LoggedIn) -> dict[str, Any]:
    """One of the identity's beneficiary batches."""
    return batch_body(await service.batch_of(session.ctx, session.auth.identity_id, id))


@router.get(
    "/beneficiaries/{id}",
    operation_id="beneficiaryGet",
    response_model=BeneficiaryRead,
    response_model_exclude_none=True,
    responses=not_found("no beneficiary of the identity has this id"),
)
async def beneficiary_get(id: Id, session: LoggedIn) -> dict[str, Any]:
    """One of the identity's beneficiaries."""
    return beneficiary_body(await service.get(session.ctx, session.auth.identity_id, id))


CHALLENGE_404 = not_found("no batch of the identity has this id")


@router.post(
    "/beneficiaries/batch/{id}/challenges/otp/{channel}",
    operation_id="beneficiaryBatchSCAChallenge",
    status_code=204,
    response_class=Response,
    dependencies=[*CallerCodeSendLimited],
    responses={**conflicts(*START), **CHALLENGE_404},
)
async def batch_challenge_otp(id: Id, channel: SCAOtpChannel, session: LoggedIn) -> Response:
    """An SMS code to confirm the batch, to the user's enrolled mobile; the batch must be
    `PENDING_CHALLENGE` with no challenge started (a second start is `STATE_INVALID`)."""
    await service.start_otp(session.ctx, session.auth, id)
    return Response(status_code=204)


@router.post(
    "/beneficiaries/batch/{id}/challenges/otp/{channel}/verify",
    operation_id="beneficiaryBatchSCAVerify",
    status_code=204,
    response_class=Response,
    dependencies=[*CallerCodeVerifyLimited],
    responses={**conflicts(*VERIFY), **CHALLENGE_404},
)
async def batch_verify_otp(
    id: Id, channel: SCAOtpChannel, body: VerificationCodeBody, session: LoggedIn
) -> Response:
    """The batch's SMS code, from the user who started it: the batch is `COMPLETED`, its new
    beneficiaries `ACTIVE` (or its removed ones `REMOVED`). Wrong codes count down to
    `ONE_CHALLENGE_LIMIT_REMAINING`, then `CHALLENGE_LIMIT_EXCEEDED` fails the batch."""
    await service.verify_otp(session.ctx, session.auth, id, body.verificationCode)
    return Response(status_code=204)


@router.post(
    "/beneficiaries/batch/{id}/challenges/push/{channel}",
    operation_id="beneficiaryBatchSCAChallengePush",
    status_code=204,
    response_class=Response,
    dependencies=[*CallerCodeSendLimited],
    responses={**conflicts(*START, "CHALLENGE_LIMIT_EXCEEDED"), **CHALLENGE_404},
)
async def batch_challenge_push(id: Id, channel: SCAPushChannel, session: LoggedIn) -> Response:
    """A push to confirm the batch, to the user's enrolled device. In the sandbox the simulator
    answers it: `POST /simulate/api/authy/beneficiary_management/{id}/accept` (or `reject`;
    `okay/…` for `BIOMETRIC`)."""
    await service.start_push(session.ctx, session.auth, id, channel.value)
    return Response(status_code=204)
