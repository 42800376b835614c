"""Fee charges (3.29.1): `POST /corporates/fees/charge` and `/consumers/fees/charge` answer the
fee transaction."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from multibank.api.deps import (
    CallerIdempotent,
    ConsumerSession,
    CorporateSession,
    Session,
    checks_session_in_transaction,
    conflicts,
)
from multibank.api.routing import UnitOfWorkRouter
from multibank.fees import service
from multibank.identities.schemas import Read
from multibank.kernel.vocabulary import DigitsId, Wire

router = UnitOfWorkRouter()
CONFLICTS = conflicts(
    "UNRESOLVED_FEE_TYPE",
    "UNRESOLVED_CURRENCY",
    "UNRESOLVED_INSTRUMENT",
    "FUNDS_INSUFFICIENT",
    "IDENTITY_NOT_OWNER_OF_INSTRUMENT",
)


class InstrumentId(Wire):
    id: DigitsId
    type: Literal["managed_cards", "managed_accounts"]


class ChargeFeeRequest(Wire):
    feeType: str
    source: InstrumentId


class CurrencyAmount(BaseModel):
    currency: str
    amount: int


class TransactionId(BaseModel):
    type: str
    id: DigitsId


class ChargeFeeRead(Read):
    transactionId: TransactionId
    profileId: DigitsId
    feeType: str
    source: InstrumentId
    availableBalanceAdjustment: CurrencyAmount
    state: str
    creationTimestamp: int


async def charge(body: ChargeFeeRequest, session: Session) -> service.FeeCharge:
    return await service.charge(
        session.ctx, session.identity_id, body.feeType, body.source.type, body.source.id
    )


def charge_body(fee: service.FeeCharge) -> dict[str, Any]:
    """`ChargeFeeRead`'s fields, none None."""
    # The fee is final when this answers; INITIALISED is the state the interface shows.
    return {
        "transactionId": {"type": "CHARGE_FEE", "id": str(fee.transaction.id)},
        "profileId": str(fee.profile_id),
        "feeType": fee.fee_type,
        "source": {"id": str(fee.source_id), "type": fee.source_type},
        "availableBalanceAdjustment": {"currency": fee.currency, "amount": -fee.amount},
        "state": "INITIALISED",
        "creationTimestamp": fee.transaction.created_at,
    }


@router.post(
    "/corporates/fees/charge",
    operation_id="corporateChargeFee",
    tags=["Corporates"],
    response_model=ChargeFeeRead,
    dependencies=[CallerIdempotent],
    responses=CONFLICTS,
)
@checks_session_in_transaction
async def corporate_charge_fee(body: ChargeFeeRequest, session: CorporateSession) -> dict[str, Any]:
    """Charges a fee type defined in the portal to the logged-in corporate, from one of its
    accounts to the programme's revenue account."""
    return charge_body(await charge(body, session))


@router.post(
    "/consumers/fees/charge",
    operation_id="consumerChargeFee",
    tags=["Consumers"],
    response_model=ChargeFeeRead,
    dependencies=[CallerIdempotent],
    responses=CONFLICTS,
)
@checks_session_in_transaction
async def consumer_charge_fee(body: ChargeFeeRequest, session: ConsumerSession) -> dict[str, Any]:
    """Charges a fee type defined in the portal to the logged-in consumer."""
    return charge_body(await charge(body, session))
