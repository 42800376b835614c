"""Managed-account wire shapes, the same on both versions."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, StringConstraints

from multibank.kernel.vocabulary import Currency, DigitsId, Tag, Wire

FriendlyName = Annotated[str, StringConstraints(min_length=1, max_length=50)]


class ManagedAccountCreate(Wire):
    profileId: DigitsId
    friendlyName: FriendlyName
    currency: Currency
    tag: Tag | None = None


class ManagedAccountUpdate(Wire):
    tag: Tag | None = None
    friendlyName: FriendlyName | None = None


class Balances(BaseModel):
    availableBalance: int
    actualBalance: int


class State(BaseModel):
    model_config = ConfigDict(extra="ignore")

    state: str
    blockedReason: str | None = None
    destroyedReason: str | None = None


class ManagedAccountRead(BaseModel):
    id: DigitsId
    profileId: DigitsId
    tag: str | None = None
    friendlyName: str
    currency: str
    balances: Balances
    state: State
    creationTimestamp: int


class ManagedAccountsPage(BaseModel):
    accounts: list[ManagedAccountRead]
    count: int
    responseCount: int


class BankAccountDetails(BaseModel):
    beneficiaryNameAndSurname: str
    beneficiaryBank: str
    beneficiaryBankAddress: str
    paymentReference: str | None = None
    details: dict[str, str]


class ManagedAccountIban(BaseModel):
    state: str
    bankAccountDetails: list[BankAccountDetails]
