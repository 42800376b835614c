"""Corporate and consumer wire shapes of 3.29.1; 3.1.0 subclasses change only what differs."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, StringConstraints

from multibank.kernel.vocabulary import (
    Address,
    AddressWithNoRequiredFields,
    CompanyPosition,
    CompanyType,
    ConsumerSourceOfFunds,
    CorporateSourceOfFunds,
    Country,
    Currency,
    Date,
    DigitsId,
    Email,
    IdentityId,
    Industry,
    IpAddress,
    KycLevel,
    KyiStatus,
    Mobile,
    Occupation,
    PersonName,
    Tag,
    Wire,
)

FeeGroup = Annotated[str, StringConstraints(min_length=1, max_length=50)]
Free = Annotated[str, StringConstraints(max_length=200)]


class Read(BaseModel):
    """Responses leave out fields that have no value."""

    model_config = ConfigDict(extra="ignore")


# Corporates


class CorporateRootUserCreate(Wire):
    name: Annotated[str, StringConstraints(min_length=1, max_length=50)]
    surname: Annotated[str, StringConstraints(min_length=1, max_length=50)]
    email: Email
    mobile: Mobile
    companyPosition: CompanyPosition
    dateOfBirth: Date | None = None


class CompanyCreate(Wire):
    type: CompanyType
    businessAddress: Address | None = None
    name: Annotated[str, StringConstraints(min_length=1, max_length=100)]
    registrationNumber: Annotated[str, StringConstraints(min_length=1, max_length=20)] | None = None
    registrationCountry: Country
    incorporatedOn: Date | None = None


class CorporateCreate(Wire):
    profileId: DigitsId
    tag: Tag | None = None
    rootUser: CorporateRootUserCreate
    company: CompanyCreate
    industry: Industry | None = None
    sourceOfFunds: CorporateSourceOfFunds | None = None
    sourceOfFundsOther: Free | None = None
    acceptedTerms: bool
    ipAddress: IpAddress
    baseCurrency: Currency
    feeGroup: FeeGroup | None = None


class CorporateUpdate(Wire):
    tag: Tag | None = None
    industry: Industry | None = None
    sourceOfFunds: CorporateSourceOfFunds | None = None
    sourceOfFundsOther: Free | None = None
    companyBusinessAddress: Address | None = None
    feeGroup: FeeGroup | None = None
    baseCurrency: Currency | None = None
    name: PersonName | None = None
    surname: PersonName | None = None
    email: Email | None = None
    mobile: Mobile | None = None
    dateOfBirth: Date | None = None
    resetMobileCounter: bool | None = None


class CorporateRootUserRead(Read):
    id: IdentityId
    name: str
    surname: str
    email: str
    mobile: Mobile
    companyPosition: str
    active: bool
    emailVerified: bool
    mobileNumberVerified: bool
    dateOfBirth: Date | None = None


class CreatedCorporateRootUserRead(CorporateRootUserRead):
    passwordAlreadySet: bool


class CompanyRead(Read):
    name: str
    type: str
    registrationNumber: str | None = None
    registeredAddress: AddressWithNoRequiredFields | None = None
    businessAddress: Address | None = None
    countryOfRegistration: str
    incorporatedOn: Date | None = None


class CorporateRead(Read):
    id: IdentityId
    profileId: DigitsId
    tag: str | None = None
    rootUser: CorporateRootUserRead
    company: CompanyRead
    industry: str | None = None
    sourceOfFunds: str | None = None
    sourceOfFundsOther: str | None = None
    acceptedTerms: bool
    ipAddress: str
    baseCurrency: str
    feeGroup: str
    creationTimestamp: int


class CreatedCorporateRead(CorporateRead):
    rootUser: CreatedCorporateRootUserRead


class KybRead(Read):
    kybStatus: KyiStatus
    ongoingKybStatus: KyiStatus


# Consumers


class ConsumerRootUserCreate(Wire):
    name: Annotated[str, StringConstraints(min_length=1, max_length=50)]
    surname: Annotated[str, StringConstraints(min_length=1, max_length=50)]
    email: Email
    mobile: Mobile
    dateOfBirth: Date
    occupation: Occupation | None = None
    address: AddressWithNoRequiredFields | None = None
    placeOfBirth: Annotated[str, StringConstraints(max_length=100)] | None = None
    nationality: Country | None = None


class ConsumerCreate(Wire):
    profileId: DigitsId
    tag: Tag | None = None
    rootUser: ConsumerRootUserCreate
    ipAddress: IpAddress
    acceptedTerms: bool
    baseCurrency: Currency | None = None
    feeGroup: FeeGroup | None = None
    sourceOfFunds: ConsumerSourceOfFunds | None = None
    sourceOfFundsOther: Free | None = None


class ConsumerUpdate(Wire):
    tag: Tag | None = None
    name: PersonName | None = None
    surname: PersonName | None = None
    email: Email | None = None
    mobile: Mobile | None = None
    dateOfBirth: Date | None = None
    address: AddressWithNoRequiredFields | None = None
    feeGroup: FeeGroup | None = None
    baseCurrency: Currency | None = None
    occupation: Occupation | None = None
    sourceOfFunds: ConsumerSourceOfFunds | None = None
    sourceOfFundsOther: Free | None = None
    placeOfBirth: Annotated[str, StringConstraints(max_length=100)] | None = None
    nationality: Country | None = None
    resetMobileCounter: bool | None = None


class ConsumerRootUserRead(Read):
    id: IdentityId
    name: str
    surname: str
    email: str
    mobile: Mobile
    occupation: str | None = None
    active: bool
    emailVerified: bool
    mobileNumberVerified: bool
    dateOfBirth: Date | None = None
    address: AddressWithNoRequiredFields | None = None
    nationality: str | None = None
    placeOfBirth: str | None = None


class ConsumerRead(Read):
    id: IdentityId
    profileId: DigitsId
    tag: str | None = None
    rootUser: ConsumerRootUserRead
    creationTimestamp: int
    ipAddress: str
    acceptedTerms: bool
    baseCurrency: str | None = None
    feeGroup: str
    sourceOfFunds: str | None = None
    sourceOfFundsOther: str | None = None


class KycStartRequest(Wire):
    kycLevel: KycLevel | None = None


class KycStartRead(Read):
    reference: DigitsId
    kycLevel: KycLevel


class KycRead(Read):
    fullDueDiligence: KyiStatus
    kycLevel: KycLevel | None = None
    ongoingFullDueDiligence: KyiStatus
    ongoingKycLevel: KycLevel | None = None


class MobileKycRead(Read):
    verificationFlow: str
    accessToken: str
    identityType: str
    externalUserId: str
    kycProviderKey: str
    kycLevel: KycLevel
