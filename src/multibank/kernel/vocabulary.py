"""The wire vocabulary every domain and both interface versions share (contract §6): field
types, enums and small bodies. In the kernel, so a domain's schemas never import the HTTP layer."""

from __future__ import annotations

import functools
from typing import Annotated, Any

import email_validator
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    StringConstraints,
    validate_email,
)
from pydantic_core import core_schema

from multibank.kernel.wire import StrictBody, WireEnum

DigitsId = Annotated[str, StringConstraints(pattern=r"^[0-9]+$", max_length=19)]
Tag = Annotated[str, StringConstraints(pattern=r"^[a-zA-Z0-9_-]+$", max_length=50)]
Currency = Annotated[str, StringConstraints(pattern=r"^[A-Z]*$", min_length=3, max_length=3)]
Country = Annotated[str, StringConstraints(pattern=r"^[A-Z]+$", min_length=2, max_length=2)]
PostCode = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9 -]*$", max_length=10)]
VerificationCode = Annotated[
    str, StringConstraints(pattern=r"^[0-9]+$", min_length=6, max_length=6)
]
Nonce = Annotated[
    str,
    StringConstraints(
        pattern=r"^[a-zA-Z0-9_.*@-]*$|^[a-zA-Z0-9.!#$%&*+\/=?^_|~-]+@[a-zA-Z0-9_-]+(?:.[a-zA-Z0-9_-]+)*$",
        max_length=50,
    ),
]
# Root-user names in updates (3.29.1); 3.1.0 also refuses `[` and `]`.
PersonName = Annotated[
    str, StringConstraints(pattern=r"^[^0-9~!@#$%^*()_+={}\\|:;,<>/?]*$", max_length=20)
]
PersonName310 = Annotated[
    str, StringConstraints(pattern=r"^[^0-9~!@#$%^*()_+={}\[\]\\|:;,<>/?]*$", max_length=20)
]


@functools.lru_cache(maxsize=10_000)
def _checked_email(value: str) -> str:
    """pydantic's `EmailStr` check and normalisation (email-validator's syntax rules, 19 µs),
    remembered per address: a pure function of its input, and the same addresses come back
    (a user's next login, decision 0025). A refused address raises, and is not remembered."""
    return validate_email(value)[1]


# What `validate_email` refuses beyond the syntax, said where a client reads the field.
EMAIL_RULES = (
    "An e-mail address whose domain has a dot and is not a special-use or reserved name ("
    + ", ".join(f"`.{name}`" for name in email_validator.SPECIAL_USE_DOMAIN_NAMES)
    + "); any other is a 400."
)


class EmailCheck:
    """What makes `Email` pydantic's `EmailStr`: the same check and normalisation (remembered,
    `_checked_email`), errors and JSON schema, with its rules described. Made with pydantic's
    documented hooks for a marker in `Annotated`."""

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(_checked_email, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> dict[str, Any]:
        out = dict(handler(schema))
        out.update(type="string", format="email")
        out.setdefault("description", EMAIL_RULES)
        return out


Email = Annotated[str, EmailCheck()]


IpAddress = Annotated[str, StringConstraints(min_length=5, max_length=45)]


class Wire(StrictBody):
    """Request bodies ignore unknown fields, as the reference service does, and take JSON types
    as declared: `"amount": false` or `"acceptedTerms": 1` is a 400, not a guess."""

    model_config = ConfigDict(extra="ignore", strict=True)


class SensitivePassword(Wire):
    value: Annotated[str, Field(max_length=100, json_schema_extra={"format": "password"})]


class PasswordValidateRequest(Wire):
    password: SensitivePassword


class Mobile(Wire):
    countryCode: Annotated[str, StringConstraints(min_length=1, max_length=6)]
    number: Annotated[str, StringConstraints(pattern=r"^[0-9]+$", min_length=1, max_length=15)]


class Date(Wire):
    year: Annotated[int, Field(ge=1900, le=2100)]
    month: Annotated[int, Field(ge=1, le=12)]
    day: Annotated[int, Field(ge=1, le=31)]


class Address(Wire):
    addressLine1: Annotated[str, StringConstraints(max_length=150)]
    addressLine2: Annotated[str, StringConstraints(max_length=150)] | None = None
    city: Annotated[str, StringConstraints(max_length=50)]
    postCode: PostCode
    state: Annotated[str, StringConstraints(max_length=50)] | None = None
    country: Country


class AddressWithNoRequiredFields(Wire):
    addressLine1: Annotated[str, StringConstraints(max_length=150)] | None = None
    addressLine2: Annotated[str, StringConstraints(max_length=150)] | None = None
    city: Annotated[str, StringConstraints(max_length=50)] | None = None
    postCode: PostCode | None = None
    state: Annotated[str, StringConstraints(max_length=50)] | None = None
    country: Country | None = None


class IdentityType(WireEnum):
    CONSUMER = "CONSUMER"
    CORPORATE = "CORPORATE"


class IdentityId(BaseModel):
    type: IdentityType
    id: DigitsId


class TypeId(BaseModel):
    type: str
    id: DigitsId


class EmailRequest(Wire):
    email: Email


class EmailVerifyRequest(Wire):
    email: Email
    verificationCode: VerificationCode


class VerificationCodeRequest(Wire):
    verificationCode: VerificationCode


class TokenResponse(BaseModel):
    token: str


class ReferenceResponse(BaseModel):
    reference: DigitsId


class Industry(WireEnum):
    ACCOUNTING = "ACCOUNTING"
    AUDIT = "AUDIT"
    FINANCE = "FINANCE"
    PUBLIC_SECTOR_ADMINISTRATION = "PUBLIC_SECTOR_ADMINISTRATION"
    ART_ENTERTAINMENT = "ART_ENTERTAINMENT"
    AUTO_AVIATION = "AUTO_AVIATION"
    BANKING_LENDING = "BANKING_LENDING"
    BUSINESS_CONSULTANCY_LEGAL = "BUSINESS_CONSULTANCY_LEGAL"
    CONSTRUCTION_REPAIR = "CONSTRUCTION_REPAIR"
    EDUCATION_PROFESSIONAL_SERVICES = "EDUCATION_PROFESSIONAL_SERVICES"
    INFORMATIONAL_TECHNOLOGIES = "INFORMATIONAL_TECHNOLOGIES"
    TOBACCO_ALCOHOL = "TOBACCO_ALCOHOL"
    GAMING_GAMBLING = "GAMING_GAMBLING"
    MEDICAL_SERVICES = "MEDICAL_SERVICES"
    MANUFACTURING = "MANUFACTURING"
    PR_MARKETING = "PR_MARKETING"
    PRECIOUS_GOODS_JEWELRY = "PRECIOUS_GOODS_JEWELRY"
    NON_GOVERNMENTAL_ORGANIZATION = "NON_GOVERNMENTAL_ORGANIZATION"
    INSURANCE_SECURITY = "INSURANCE_SECURITY"
    RETAIL_WHOLESALE = "RETAIL_WHOLESALE"
    TRAVEL_TOURISM = "TRAVEL_TOURISM"
    FREELANCER = "FREELANCER"


class Occupation(WireEnum):
    ACCOUNTING = "ACCOUNTING"
    AUDIT = "AUDIT"
    FINANCE = "FINANCE"
    PUBLIC_SECTOR_ADMINISTRATION = "PUBLIC_SECTOR_ADMINISTRATION"
    ART_ENTERTAINMENT = "ART_ENTERTAINMENT"
    AUTO_AVIATION = "AUTO_AVIATION"
    BANKING_LENDING = "BANKING_LENDING"
    BUSINESS_CONSULTANCY_LEGAL = "BUSINESS_CONSULTANCY_LEGAL"
    CONSTRUCTION_REPAIR = "CONSTRUCTION_REPAIR"
    EDUCATION_PROFESSIONAL_SERVICES = "EDUCATION_PROFESSIONAL_SERVICES"
    INFORMATIONAL_TECHNOLOGIES = "INFORMATIONAL_TECHNOLOGIES"
    TOBACCO_ALCOHOL = "TOBACCO_ALCOHOL"
    GAMING_GAMBLING = "GAMING_GAMBLING"
    MEDICAL_SERVICES = "MEDICAL_SERVICES"
    MANUFACTURING = "MANUFACTURING"
    PR_MARKETING = "PR_MARKETING"
    PRECIOUS_GOODS_JEWELRY = "PRECIOUS_GOODS_JEWELRY"
    NON_GOVERNMENTAL_ORGANIZATION = "NON_GOVERNMENTAL_ORGANIZATION"
    INSURANCE_SECURITY = "INSURANCE_SECURITY"
    RETAIL_WHOLESALE = "RETAIL_WHOLESALE"
    TRAVEL_TOURISM = "TRAVEL_TOURISM"
    FREELANCER = "FREELANCER"
    STUDENT = "STUDENT"
    UNEMPLOYED = "UNEMPLOYED"
    RETIRED = "RETIRED"
    OTHER = "OTHER"


class CorporateSourceOfFunds(WireEnum):
    LABOUR_CONTRACT = "LABOUR_CONTRACT"
    CIVIL_CONTRACT = "CIVIL_CONTRACT"
    RENT = "RENT"
    FUNDS_FROM_OTHER_AUXILIARY_SOURCES = "FUNDS_FROM_OTHER_AUXILIARY_SOURCES"
    SALE_OF_MOVABLE_ASSETS = "SALE_OF_MOVABLE_ASSETS"
    SALE_OF_REAL_ESTATE = "SALE_OF_REAL_ESTATE"
    ORDINARY_BUSINESS_ACTIVITY = "ORDINARY_BUSINESS_ACTIVITY"
    DIVIDENDS = "DIVIDENDS"
    LOAN_FROM_FINANCIAL_INSTITUTIONS_CREDIT_UNIONS = (
        "LOAN_FROM_FINANCIAL_INSTITUTIONS_CREDIT_UNIONS"
    )
    LOAN_FROM_THIRD_PARTIES = "LOAN_FROM_THIRD_PARTIES"
    SALE_OF_COMPANY_SHARES_BUSINESS = "SALE_OF_COMPANY_SHARES_BUSINESS"
    OTHER = "OTHER"


class ConsumerSourceOfFunds(WireEnum):
    PERSONAL_SAVINGS = "PERSONAL_SAVINGS"
    FAMILY_SAVINGS = "FAMILY_SAVINGS"
    LABOUR_CONTRACT = "LABOUR_CONTRACT"
    CIVIL_CONTRACT = "CIVIL_CONTRACT"
    RENT = "RENT"
    FUNDS_FROM_OTHER_AUXILIARY_SOURCES = "FUNDS_FROM_OTHER_AUXILIARY_SOURCES"
    SALE_OF_MOVABLE_ASSETS = "SALE_OF_MOVABLE_ASSETS"
    SALE_OF_REAL_ESTATE = "SALE_OF_REAL_ESTATE"
    ORDINARY_BUSINESS_ACTIVITY = "ORDINARY_BUSINESS_ACTIVITY"
    DIVIDENDS = "DIVIDENDS"
    LOAN_FROM_FINANCIAL_INSTITUTIONS_CREDIT_UNIONS = (
        "LOAN_FROM_FINANCIAL_INSTITUTIONS_CREDIT_UNIONS"
    )
    LOAN_FROM_THIRD_PARTIES = "LOAN_FROM_THIRD_PARTIES"
    SALE_OF_COMPANY_SHARES_BUSINESS = "SALE_OF_COMPANY_SHARES_BUSINESS"
    OTHER = "OTHER"
    INHERITANCE = "INHERITANCE"


class CompanyType(WireEnum):
    SOLE_TRADER = "SOLE_TRADER"
    LLC = "LLC"
    PUBLIC_LIMITED_COMPANY = "PUBLIC_LIMITED_COMPANY"
    LIMITED_LIABILITY_PARTNERSHIP = "LIMITED_LIABILITY_PARTNERSHIP"
    NON_PROFIT_ORGANISATION = "NON_PROFIT_ORGANISATION"


class CompanyPosition(WireEnum):
    DIRECTOR = "DIRECTOR"
    AUTHORISED_REPRESENTATIVE = "AUTHORISED_REPRESENTATIVE"


class KycLevel(WireEnum):
    KYC_LEVEL_1 = "KYC_LEVEL_1"
    KYC_LEVEL_2 = "KYC_LEVEL_2"


class KyiStatus(WireEnum):
    NOT_STARTED = "NOT_STARTED"
    INITIATED = "INITIATED"
    PENDING_REVIEW = "PENDING_REVIEW"
    APPROVED = "APPROVED"
    REJECTED = "REJECTED"
