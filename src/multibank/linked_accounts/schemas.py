"""Linked-account wire shapes of the 3.63 line (v3.63.md §4.2, D39)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator
from pydantic_core import PydanticCustomError
from stdnum import iban as stdnum_iban

from multibank.kernel.vocabulary import Country, Currency, DigitsId, IdentityId, Tag, Wire

FriendlyName = Annotated[str, StringConstraints(min_length=1, max_length=50)]
AccountType = Literal["BUSINESS", "PERSONAL"]
LinkedAccountState = Literal["PENDING_VERIFICATION", "BLOCKED", "ACTIVE", "REJECTED", "REMOVED"]
RunState = Literal["PENDING", "VERIFIED", "REJECTED"]
StepName = Literal[
    "TRANSFER_INSTRUCTION", "USER_DECLARATION_SCA_CHALLENGE", "INTERNAL_CHECKS", "MICRO_DEPOSIT"
]
StepStatus = Literal["PENDING_USER", "PENDING_REVIEW", "PENDING_EXECUTION", "REJECTED", "COMPLETED"]
Iban = Annotated[
    str,
    StringConstraints(pattern=r"^[A-Z]{2}[0-9]{2}[A-Z0-9]{11,30}$", min_length=15, max_length=34),
    Field(description="Upper case, no spaces; its check digits must verify (mod 97), else 400."),
]


class AccountReferenceWrite(Wire):
    """One of three forms: `{iban, bankIdentifierCode}`, `{accountNumber, sortCode,
    secondaryReference}` or `{accountDescriptor}`. Which fields were sent together is a
    business rule (409, D39), not a 400: each field is only checked for its own shape here."""

    iban: Iban | None = None
    bankIdentifierCode: (
        Annotated[str, StringConstraints(pattern=r"^[A-Z0-9]+$", min_length=8, max_length=11)]
        | None
    ) = None
    accountNumber: Annotated[str, StringConstraints(pattern=r"^[0-9]{8}$")] | None = None
    sortCode: Annotated[str, StringConstraints(pattern=r"^[0-9]{6}$")] | None = None
    secondaryReference: Annotated[str, StringConstraints(max_length=50)] | None = None
    accountDescriptor: Annotated[str, StringConstraints(max_length=100)] | None = None

    @field_validator("iban")
    @classmethod
    def _check_digits(cls, value: str | None) -> str | None:
        if value is not None and not stdnum_iban.is_valid(value):
            raise PydanticCustomError("value_error", "check digits do not verify")
        return value


class LinkedAccountCreate(Wire):
    profileId: DigitsId | None = None
    tag: Tag | None = None
    name: Annotated[str, StringConstraints(min_length=1, max_length=100)]
    type: AccountType
    accountReference: AccountReferenceWrite
    country: Country
    friendlyName: Annotated[str, StringConstraints(max_length=50)] | None = None
    currency: Currency | None = None


class LinkedAccountUpdate(Wire):
    tag: Tag | None = None
    friendlyName: FriendlyName | None = None


class LinkedAccountRead(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: DigitsId
    profileId: DigitsId
    tag: str | None = None
    friendlyName: str | None = None
    name: str
    type: AccountType
    currency: str
    country: str
    accountReference: dict[str, str]
    state: LinkedAccountState
    creationTimestamp: int
    owner: IdentityId


class LinkedAccountsPage(BaseModel):
    accounts: list[LinkedAccountRead]
    count: int
    responseCount: int


class VerificationStepRead(BaseModel):
    step: StepName
    status: StepStatus
    details: dict[str, object] | None = None
    completedTimestamp: int | None = None


class VerificationRunRead(BaseModel):
    id: DigitsId
    state: RunState
    completedTimestamp: int | None = None
    verificationSteps: list[VerificationStepRead]
    overriddenReason: str | None = None


class VerificationRunsPage(BaseModel):
    verificationRuns: list[VerificationRunRead]
    count: int
    responseCount: int


# The simulator's bodies (v3.63.md §4.3, D42).


class SimulatedDecision(Wire):
    state: Literal["VERIFIED", "REJECTED"]


class SimulatedSteps(Wire):
    steps: Annotated[list[StepName], Field(min_length=1, max_length=4)]
    result: Literal["COMPLETED", "REJECTED"]
