"""Payment wire shapes of 3.29.1 (money-movement.md §1.1 to §1.2, the 3.32.1 shapes)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, StringConstraints

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


# Sends (§1.3): the request and the answer have the transfer's shape.
SendState = Literal[
    "INITIALISED", "COMPLETED", "REJECTED", "FAILED", "PENDING", "PENDING_CHALLENGE", "APPROVED"
]
SEND_STATES = (
    "INITIALISED",
    "COMPLETED",
    "REJECTED",
    "FAILED",
    "PENDING",
    "PENDING_CHALLENGE",
    "APPROVED",
)


class SendRead(BaseModel):
    id: DigitsId
    profileId: DigitsId
    tag: str | None = None
    source: InstrumentIdRead
    destination: InstrumentIdRead
    destinationAmount: CurrencyAmountRead
    state: SendState
    creationTimestamp: int


class SendsPage(BaseModel):
    send: list[SendRead]
    count: int
    responseCount: int


class VerificationCodeBody(Wire):
    verificationCode: Annotated[str, StringConstraints(pattern=r"^[0-9]{6}$")]


# Outgoing wire transfers (§1.4). `INVALID` (a refused create kept for its idempotency-ref) is
# a state of later versions: the 3.29.1 surface never shows such a payment (D12a).
OwtState = Literal[
    "PENDING_CHALLENGE",
    "SUBMITTED",
    "REJECTED",
    "APPROVED",
    "FAILED",
    "COMPLETED",
    "RETURNED",
]
OWT_STATES = (
    "PENDING_CHALLENGE",
    "SUBMITTED",
    "REJECTED",
    "APPROVED",
    "FAILED",
    "COMPLETED",
    "RETURNED",
)
Text150 = Annotated[str, StringConstraints(min_length=1, max_length=150)]


class SepaBankDetails(Wire):
    iban: Annotated[
        str,
        StringConstraints(
            pattern=r"^[a-zA-Z]{2}[0-9]{2}[a-zA-Z0-9]{11,30}$", min_length=15, max_length=34
        ),
    ]
    bankIdentifierCode: Annotated[
        str, StringConstraints(pattern=r"^[A-Za-z0-9]+$", min_length=8, max_length=11)
    ]


class FasterPaymentsBankDetails(Wire):
    accountNumber: Annotated[str, StringConstraints(pattern=r"^[0-9]{8}$")]
    sortCode: Annotated[str, StringConstraints(pattern=r"^[0-9]{6}$")]


# The interface's addresses here are text (1-150); the demo app's client types them as address
# objects, so an object of short text fields is taken too, and answered as sent.
AddressObject = Annotated[
    dict[Annotated[str, StringConstraints(max_length=50)], Text150], Field(max_length=10)
]


class Beneficiary(Wire):
    name: Annotated[str, StringConstraints(min_length=1, max_length=200)]
    address: Text150 | AddressObject | None = None
    bankName: Annotated[str, StringConstraints(max_length=150)] | None = None
    bankAddress: Text150 | AddressObject | None = None
    bankCountry: Annotated[str, StringConstraints(pattern=r"^[A-Z]{2}$")] | None = None
    bankAccountDetails: SepaBankDetails | FasterPaymentsBankDetails


class OwtCreate(Wire):
    profileId: DigitsId
    tag: Tag | None = None
    sourceInstrument: InstrumentId
    transferAmount: CurrencyAmount
    # The reference the beneficiary sees: required for SEPA (at most 35), at most 18 for
    # Faster Payments; checked against the scheme the bank details name.
    description: Annotated[str, StringConstraints(max_length=35)] | None = None
    destinationBeneficiary: Beneficiary


class SepaBankDetailsRead(BaseModel):
    iban: str
    bankIdentifierCode: str


class FasterPaymentsBankDetailsRead(BaseModel):
    accountNumber: str
    sortCode: str


class BeneficiaryRead(BaseModel):
    name: str
    address: str | dict[str, str] | None = None
    bankName: str | None = None
    bankAddress: str | dict[str, str] | None = None
    bankCountry: str | None = None
    bankAccountDetails: SepaBankDetailsRead | FasterPaymentsBankDetailsRead


class OwtRead(BaseModel):
    id: DigitsId
    profileId: DigitsId
    tag: str | None = None
    sourceInstrument: InstrumentIdRead
    transferAmount: CurrencyAmountRead
    description: str | None = None
    type: Literal["SEPA", "FASTER_PAYMENTS", "SWIFT"]
    destination: BeneficiaryRead
    state: OwtState
    rejectedInfo: Literal["SYSTEM", "USER"] | None = None
    creationTimestamp: int


class OwtPage(BaseModel):
    """The reference names the list `transfer`, as for transfers."""

    transfer: list[OwtRead]
    count: int
    responseCount: int
