"""Payment wire shapes of 3.29.1 (money-movement.md §1.1 to §1.2, the 3.32.1 shapes)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from multibank.kernel.vocabulary import Currency, DigitsId, Tag, Wire

INT64_MAX = 2**63 - 1
InstrumentType = Literal["managed_cards", "managed_accounts"]
TransferState = Literal["INITIALISED", "COMPLETED", "REJECTED", "FAILED", "PENDING"]
TRANSFER_STATES = ("INITIALISED", "COMPLETED", "REJECTED", "FAILED", "PENDING")


class InstrumentId(Wire):
    id: DigitsId
    type: InstrumentType


class CurrencyAmount(Wire):
    currency: Currency
    # int64 minor units; a zero or negative amount is a business refusal (AMOUNT_INVALID).
    amount: Annotated[int, Field(ge=-INT64_MAX - 1, le=INT64_MAX)]


class TransferCreate(Wire):
    profileId: DigitsId
    tag: Tag | None = None
    source: InstrumentId
    destination: InstrumentId
    destinationAmount: CurrencyAmount


class InstrumentIdRead(BaseModel):
    id: DigitsId
    type: InstrumentType


class CurrencyAmountRead(BaseModel):
    currency: str
    amount: int


class TransferRead(BaseModel):
    id: DigitsId
    profileId: DigitsId
    tag: str | None = None
    source: InstrumentIdRead
    destination: InstrumentIdRead
    destinationAmount: CurrencyAmountRead
    state: TransferState
    creationTimestamp: int


class TransfersPage(BaseModel):
    """The reference names the list `transfer`, in the singular."""

    transfer: list[TransferRead]
    count: int
    responseCount: int
