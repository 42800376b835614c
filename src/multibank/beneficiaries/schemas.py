"""The wire shapes of trusted beneficiaries (v3.63.md §2.2, D38)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StringConstraints, model_validator
from pydantic_core import PydanticCustomError

from multibank.kernel.vocabulary import DigitsId, Tag, Wire

Text150 = Annotated[str, StringConstraints(min_length=1, max_length=150)]
Country = Annotated[str, StringConstraints(pattern=r"^[A-Z]{2}$")]
IdText = Annotated[str, StringConstraints(pattern=r"^[0-9]+$", max_length=19)]


def _exactly_one(values: dict[str, Any], names: tuple[str, str], what: str) -> None:
    given = [n for n in names if values.get(n) is not None]
    if len(given) != 1:
        raise PydanticCustomError(
            "one_scheme",
            f"{what}: exactly one of {names[0]} and {names[1]}",
            {"exactly": 1},
        )


class BeneficiaryInformation(Wire):
    """`{businessName}` (a business) or `{fullName, nationality, dateOfBirth}` (a person)."""

    businessName: Text150 | None = None
    fullName: Text150 | None = None
    nationality: Country | None = None
    dateOfBirth: Annotated[str, StringConstraints(pattern=r"^\d{4}-\d{2}-\d{2}$")] | None = None

    @model_validator(mode="after")
    def _one(self) -> BeneficiaryInformation:
        _exactly_one(self.__dict__, ("businessName", "fullName"), "beneficiaryInformation")
        return self


class InstrumentRef(Wire):
    id: DigitsId
    type: Literal["managed_accounts", "managed_cards"]


class BankAccountDetails(Wire):
    """`{iban, bankIdentifierCode}` (SEPA) or `{accountNumber, sortCode, secondaryReference}`
    (Faster Payments)."""

    iban: (
        Annotated[
            str,
            StringConstraints(
                pattern=r"^[A-Z]{2}[0-9]{2}[A-Z0-9]{11,30}$", min_length=15, max_length=34
            ),
        ]
        | None
    ) = None
    bankIdentifierCode: (
        Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9]+$", min_length=8, max_length=11)]
        | None
    ) = None
    accountNumber: Annotated[str, StringConstraints(pattern=r"^[0-9]{8}$")] | None = None
    sortCode: Annotated[str, StringConstraints(pattern=r"^[0-9]{6}$")] | None = None
    secondaryReference: Annotated[str, StringConstraints(max_length=18)] | None = None

    @model_validator(mode="after")
    def _one(self) -> BankAccountDetails:
        _exactly_one(self.__dict__, ("iban", "accountNumber"), "bankAccountDetails")
        if self.accountNumber is not None and self.sortCode is None:
            raise PydanticCustomError("missing", "sortCode is required with accountNumber", {})
        return self


class BeneficiaryDetails(Wire):
    """`{instrument}` (an account or card of this programme) or bank account details."""

    instrument: InstrumentRef | None = None
    address: Text150 | None = None
    bankName: Annotated[str, StringConstraints(max_length=150)] | None = None
    bankAddress: Text150 | None = None
    bankCountry: Country | None = None
    bankAccountDetails: BankAccountDetails | None = None

    @model_validator(mode="after")
    def _one(self) -> BeneficiaryDetails:
        _exactly_one(self.__dict__, ("instrument", "bankAccountDetails"), "beneficiaryDetails")
        return self


class BasicBeneficiary(Wire):
    trustLevel: Literal["TRUSTED"]
    externalRefs: (
        Annotated[list[Annotated[str, StringConstraints(max_length=50)]], Field(max_length=10)]
        | None
    ) = None
    group: Annotated[str, StringConstraints(max_length=150)] | None = None
    beneficiaryInformation: BeneficiaryInformation
    beneficiaryDetails: BeneficiaryDetails


class BeneficiaryBatchCreate(Wire):
    tag: Tag | None = None
    beneficiaries: Annotated[list[BasicBeneficiary], Field(min_length=1, max_length=100)]


class BeneficiaryRemove(Wire):
    beneficiaryIds: Annotated[list[IdText], Field(min_length=1, max_length=100)]


class OperationBatchId(BaseModel):
    batchId: DigitsId
    operation: Literal["CREATE", "REMOVE"]


BatchState = Literal[
    "INITIALISED",
    "FAILED",
    "PENDING_CHALLENGE",
    "CHALLENGE_FAILED",
    "CHALLENGE_COMPLETED",
    "COMPLETED",
]
BATCH_STATES = (
    "INITIALISED",
    "FAILED",
    "PENDING_CHALLENGE",
    "CHALLENGE_FAILED",
    "CHALLENGE_COMPLETED",
    "COMPLETED",
)


class BeneficiaryBatchRead(BaseModel):
    operationBatchId: OperationBatchId
    tag: str | None = None
    state: BatchState


class BeneficiaryBatchesPage(BaseModel):
    batches: list[BeneficiaryBatchRead]
    count: int
    responseCount: int


class BeneficiaryRead(BaseModel):
    id: DigitsId
    relatedOperationBatches: list[OperationBatchId]
    state: Literal[
        "INITIALISED", "INVALID", "PENDING_CHALLENGE", "CHALLENGE_FAILED", "ACTIVE", "REMOVED"
    ]
    validationFailure: (
        Literal[
            "INSTRUMENT_DETAILS_NOT_FOUND",
            "BENEFICIARY_DETAILS_ALREADY_EXIST",
            "BENEFICIARY_BELONGS_TO_SAME_IDENTITY",
        ]
        | None
    ) = None
    trustLevel: Literal["TRUSTED"]
    externalRefs: list[str] | None = None
    group: str | None = None
    beneficiaryInformation: dict[str, Any]
    beneficiaryDetails: dict[str, Any]


class BeneficiariesPage(BaseModel):
    beneficiaries: list[BeneficiaryRead]
    count: int
    responseCount: int
