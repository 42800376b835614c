"""Payment wire shapes of 3.29.1 (money-movement.md §1.1 to §1.2, the 3.32.1 shapes)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator
from pydantic_core import PydanticCustomError

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

# What `owt.check_beneficiary` refuses (400), declared in the description as patterns its
# regular expressions say alike in Python and in a JSON Schema: text with a character that is
# not white space (`str.isspace`) and no NUL; the characters Faster Payments carries in a name.
_SPACE = (
    "\\t\\n\\v\\f\\r\\x1c-\\x1f \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000"
)
NOT_BLANK = f"^[^\\u0000]*[^\\u0000{_SPACE}][^\\u0000]*$"
FPS_TEXT = r"^[A-Za-z0-9 /\-?:().,'+#=!\"%&*<>;{@]+$"
DESCRIPTION_LIMIT = {"SEPA": 35, "FASTER_PAYMENTS": 18}


class SepaBankDetails(Wire):
    iban: Annotated[
        str,
        StringConstraints(
            pattern=r"^[a-zA-Z]{2}[0-9]{2}[a-zA-Z0-9]{11,30}$", min_length=15, max_length=34
        ),
        Field(
            description="Its check digits must verify (ISO 13616, mod 97), else 400; in the "
            "sandbox, the canned `WV38WEAV50201555…` IBANs that name an outcome are taken as "
            "written."
        ),
    ]
    bankIdentifierCode: Annotated[
        str, StringConstraints(pattern=r"^[A-Za-z0-9]+$", min_length=8, max_length=11)
    ]


class FasterPaymentsBankDetails(Wire):
    accountNumber: Annotated[str, StringConstraints(pattern=r"^[0-9]{8}$")]
    sortCode: Annotated[str, StringConstraints(pattern=r"^[0-9]{6}$")]


_SEPA_FIELDS = frozenset(SepaBankDetails.model_fields)
_FPS_FIELDS = frozenset(FasterPaymentsBankDetails.model_fields)


def _one_of(schema: dict[str, Any]) -> None:
    """The bank details' schema says `oneOf`: an object matching both shapes is refused."""
    if "anyOf" in schema:
        schema["oneOf"] = schema.pop("anyOf")


# The interface's addresses here are text (1-150); the demo app's client types them as address
# objects, so an object of short text fields is taken too, and answered as sent.
AddressObject = Annotated[
    dict[Annotated[str, StringConstraints(max_length=50)], Text150], Field(max_length=10)
]


class Beneficiary(Wire):
    name: Annotated[
        str,
        StringConstraints(min_length=1, max_length=200),
        Field(
            description="Not blank; for Faster Payments only the characters that scheme "
            "carries (letters, digits, space and `/-?:().,'+#=!\"%&*<>;{@`).",
            json_schema_extra={"pattern": NOT_BLANK},
        ),
    ]
    address: Text150 | AddressObject | None = None
    bankName: Annotated[str, StringConstraints(max_length=150)] | None = None
    bankAddress: Text150 | AddressObject | None = None
    bankCountry: Annotated[str, StringConstraints(pattern=r"^[A-Z]{2}$")] | None = None
    bankAccountDetails: Annotated[
        SepaBankDetails | FasterPaymentsBankDetails,
        Field(
            description="The details of one scheme: SEPA (`iban`, `bankIdentifierCode`) or "
            "Faster Payments (`accountNumber`, `sortCode`). An object with fields of both is a "
            "400 (`EXACTLY` 1), not a guess of which one was meant.",
            json_schema_extra=_one_of,
        ),
    ]

    @field_validator("bankAccountDetails", mode="before")
    @classmethod
    def _one_scheme(cls, value: Any) -> Any:
        # Unknown fields are ignored (`Wire`), so without this an object carrying both schemes'
        # details would be read as SEPA: a proxy or reviewer that saw the sort code would see
        # another payment than the server makes.
        if isinstance(value, dict) and not (
            _SEPA_FIELDS.isdisjoint(value) or _FPS_FIELDS.isdisjoint(value)
        ):
            raise PydanticCustomError(
                "one_scheme",
                "must hold the details of exactly one scheme: iban and bankIdentifierCode "
                "(SEPA) or accountNumber and sortCode (Faster Payments)",
                {"exactly": 1},
            )
        return value


class OwtCreate(Wire):
    # The scheme's rules, as the description states them: with SEPA bank details (an `iban`)
    # the reference is required and not blank; with Faster Payments it is at most 18
    # characters and the beneficiary's name uses that scheme's characters.
    model_config = ConfigDict(
        json_schema_extra={
            "if": {
                "properties": {
                    "destinationBeneficiary": {
                        "properties": {"bankAccountDetails": {"required": ["iban"]}}
                    }
                }
            },
            "then": {
                "required": ["description"],
                "properties": {"description": {"pattern": NOT_BLANK}},
            },
            "else": {
                "properties": {
                    "description": {"maxLength": DESCRIPTION_LIMIT["FASTER_PAYMENTS"]},
                    "destinationBeneficiary": {"properties": {"name": {"pattern": FPS_TEXT}}},
                }
            },
        }
    )

    profileId: DigitsId
    tag: Tag | None = None
    sourceInstrument: InstrumentId
    transferAmount: CurrencyAmount
    # The reference the beneficiary sees: checked against the scheme the bank details name.
    description: (
        Annotated[
            str,
            StringConstraints(max_length=DESCRIPTION_LIMIT["SEPA"]),
            Field(
                description="The reference the beneficiary sees. SEPA (EUR): required, not blank, "
                "at most 35 characters. Faster Payments (GBP): optional, at most 18 characters. "
                "Otherwise 400."
            ),
        ]
        | None
    ) = None
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


class BeneficiaryRef(Wire):
    """A trusted beneficiary of the caller's identity (D38), paid without SCA."""

    beneficiaryId: Annotated[str, StringConstraints(pattern=r"^[0-9]+$", max_length=19)]


class BeneficiaryIdRead(BaseModel):
    beneficiaryId: DigitsId


class LinkedAccountRef(Wire):
    """One of the caller's identity's own linked accounts (D39)."""

    type: Literal["linked_accounts"]
    id: Annotated[str, StringConstraints(pattern=r"^[0-9]+$", max_length=19)]


class LinkedAccountRefRead(BaseModel):
    type: Literal["linked_accounts"]
    id: DigitsId


# The 3.63 line's wire transfers (v3.63.md §5.1, §6; D35, D41): every state of the line, the
# exemption that applied, the Confirmation of Payee outcomes and a cancel's reason.
OwtState3_63 = Literal[
    "INVALID",
    "PENDING_CHALLENGE",
    "SUBMITTED",
    "REJECTED",
    "APPROVED",
    "FAILED",
    "COMPLETED",
    "RETURNED",
    "SCHEDULED",
    "CANCELLED",
    "PENDING_CONFIRMATION",
]
OWT_STATES_3_63 = (*OWT_STATES, "INVALID", "SCHEDULED", "CANCELLED", "PENDING_CONFIRMATION")
CopReasonCode = Literal[
    "ANNM", "MBAM", "BANM", "PANM", "BAMM", "PAMM", "AC01", "IVCR", "ACNS", "OPTO", "CASS", "SCNS"
]
# A reason a payer gives with a cancel (v3.63.md §5.1).
CancellationReason = Annotated[str, StringConstraints(max_length=50, pattern=r"^[ a-zA-Z0-9_-]+$")]


class CopResultRead(BaseModel):
    match: Literal["EXACT_MATCH", "CLOSE_MATCH", "NO_MATCH"]
    reasonCode: CopReasonCode | None = None
    accountName: str | None = None


class ValidationOutcomeRead(BaseModel):
    category: Literal["UK_CONFIRMATION_OF_PAYEE"]
    categoryResult: CopResultRead


class OwtRead3_63(OwtRead):
    destination: BeneficiaryRead | BeneficiaryIdRead | LinkedAccountRefRead  # type: ignore[assignment]
    state: OwtState3_63  # type: ignore[assignment]  # the line's states include 3.29.1's
    challengeExemptionReason: Literal["LOW_VALUE", "TRUSTED_BENEFICIARY"] | None = None
    validationOutcomes: list[ValidationOutcomeRead] | None = None
    scheduledTimestamp: DigitsId | None = None
    executionTimestamp: DigitsId | None = None
    cancellationReason: str | None = None


class OwtPage3_63(BaseModel):
    transfer: list[OwtRead3_63]
    count: int
    responseCount: int


class CancellationBody(Wire):
    cancellationReason: CancellationReason | None = None


# Scheduling on the 3.63 line (v3.63.md §5, D40): a create's time, the answers' timestamps, and
# the bulk cancel.
ScheduledTimestamp = Annotated[
    str,
    StringConstraints(pattern=r"^[0-9]+$"),
    Field(
        description="When the payment is to go: epoch milliseconds of the programme's clock, "
        "after now and at most 365 days ahead (else 409 `SCHEDULED_TIMESTAMP_INVALID`). It "
        "waits `SCHEDULED`, nothing held, and its funds are checked when it goes."
    ),
]
TransferState3_63 = Literal[
    "INITIALISED", "COMPLETED", "REJECTED", "FAILED", "PENDING", "SCHEDULED", "CANCELLED"
]
TRANSFER_STATES_3_63 = (*TRANSFER_STATES, "SCHEDULED", "CANCELLED")
SendState3_63 = Literal[
    "INVALID",
    "INITIALISED",
    "COMPLETED",
    "REJECTED",
    "FAILED",
    "PENDING",
    "PENDING_CHALLENGE",
    "APPROVED",
    "RETURNED",
    "SCHEDULED",
    "CANCELLED",
]
SEND_STATES_3_63 = (*SEND_STATES, "INVALID", "RETURNED", "SCHEDULED", "CANCELLED")


class TransferCreate3_63(TransferCreate):
    scheduledTimestamp: ScheduledTimestamp | None = None


class SendCreate3_63(TransferCreate3_63):
    # An instrument, or a trusted beneficiary's (v3.63.md §2.4).
    destination: InstrumentId | BeneficiaryRef  # type: ignore[assignment]


class OwtCreate3_63(OwtCreate):
    scheduledTimestamp: ScheduledTimestamp | None = None
    # Bank details, or a trusted beneficiary's (v3.63.md §2.4).
    destinationBeneficiary: Beneficiary | BeneficiaryRef | LinkedAccountRef  # type: ignore[assignment]


class TransferRead3_63(TransferRead):
    state: TransferState3_63  # type: ignore[assignment]  # the line's states include 3.29.1's
    scheduledTimestamp: DigitsId | None = None
    executionTimestamp: DigitsId | None = None
    cancellationReason: str | None = None


class TransfersPage3_63(BaseModel):
    transfer: list[TransferRead3_63]
    count: int
    responseCount: int


class SendRead3_63(SendRead):
    destination: InstrumentIdRead | BeneficiaryIdRead  # type: ignore[assignment]
    state: SendState3_63  # type: ignore[assignment]  # the line's states include 3.29.1's
    challengeExemptionReason: Literal["LOW_VALUE", "TRUSTED_BENEFICIARY"] | None = None
    scheduledTimestamp: DigitsId | None = None
    executionTimestamp: DigitsId | None = None
    cancellationReason: str | None = None


class SendsPage3_63(BaseModel):
    send: list[SendRead3_63]
    count: int
    responseCount: int


class CancelItem(Wire):
    id: Annotated[str, StringConstraints(pattern=r"^[0-9]+$")]
    cancellationReason: CancellationReason | None = None


class BulkCancelBody(Wire):
    cancellations: Annotated[list[CancelItem], Field(min_length=1, max_length=100)]


class CancelResultRead(BaseModel):
    id: str
    state: Literal["SUCCESS", "ERROR"]
    errorCode: Literal["GENERIC", "TRANSACTION_NOT_SCHEDULED", "FORBIDDEN", "NOT_FOUND"] | None = (
        None
    )


class BulkCancelRead(BaseModel):
    cancellations: list[CancelResultRead]


# Batch SCA challenges on the 3.63 line (v3.63.md §3, D37).
MultipleScaResourceType = Literal["outgoing_wire_transfers", "sends", "linked_account_declaration"]


class MultipleScaBody(Wire):
    resourceType: MultipleScaResourceType
    resourceIds: Annotated[
        list[Annotated[str, StringConstraints(pattern=r"^[0-9]{1,}$", max_length=19)]],
        Field(
            min_length=1,
            max_length=100,
            json_schema_extra={"uniqueItems": True},
            description="1 to 100 ids of the caller's identity's resources of `resourceType`, "
            "each once; any that is not one answers 404 and no challenge is made.",
        ),
    ]

    @field_validator("resourceIds")
    @classmethod
    def _each_once(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise PydanticCustomError("unique_items", "must not repeat an id", {})
        return value


class MultipleScaVerifyBody(Wire):
    verificationCode: Annotated[str, StringConstraints(pattern=r"^[0-9]{6}$")]
    resourceType: MultipleScaResourceType


class ScaChallengeIdRead(BaseModel):
    scaChallengeId: DigitsId
