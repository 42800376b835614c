"""3.1.0 fee charges answer 204 with no fee transaction record."""

from __future__ import annotations

from fastapi import Response

from multibank.api.deps import (
    CallerIdempotent,
    ConsumerSession,
    CorporateSession,
    checks_session_in_transaction,
)
from multibank.api.routing import UnitOfWorkRouter
from multibank.api.v3_29.fees import CONFLICTS, ChargeFeeRequest, charge

router = UnitOfWorkRouter()


@router.post(
    "/corporates/fees/charge",
    operation_id="corporateChargeFee",
    tags=["Corporates"],
    status_code=204,
    response_class=Response,
    dependencies=[CallerIdempotent],
    responses=CONFLICTS,
)
@checks_session_in_transaction
async def corporate_charge_fee(body: ChargeFeeRequest, session: CorporateSession) -> Response:
    await charge(body, session)
    return Response(status_code=204)


@router.post(
    "/consumers/fees/charge",
    operation_id="consumerChargeFee",
    tags=["Consumers"],
    status_code=204,
    response_class=Response,
    dependencies=[CallerIdempotent],
    responses=CONFLICTS,
)
@checks_session_in_transaction
async def consumer_charge_fee(body: ChargeFeeRequest, session: ConsumerSession) -> Response:
    await charge(body, session)
    return Response(status_code=204)
