"""Managed-card wire shapes of 3.32.1 (cards.md §2, §3.3, §3.5), the same on /multi and
/3.29.1/multi."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationInfo,
    field_validator,
)
from pydantic.config import JsonDict
from pydantic_core import PydanticCustomError

from multibank.kernel.vocabulary import Country, Currency, DigitsId, PostCode, Tag, Wire
from multibank.programmes.spend_rules import CommonLevelSpendRules

FriendlyName = Annotated[str, StringConstraints(min_length=1, max_length=50)]
# Printed on the card: Latin letters (accented ones too), digits, space and . ' - ^.
NAME_ON_CARD = r"^[A-Za-z0-9\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u017f .'\-^]*$"
NameOnCard = Annotated[str, StringConstraints(pattern=NAME_ON_CARD, min_length=1, max_length=27)]
NameOnCardLine2 = Annotated[str, StringConstraints(pattern=NAME_ON_CARD, max_length=27)]
CardholderMobile = Annotated[
    str, StringConstraints(pattern=r"^\+[0-9]+$", min_length=5, max_length=20)
]
Mode = Literal["PREPAID_MODE", "DEBIT_MODE"]
# `RENEW` and `AUTO_RENEW` mean the same (D24); answers write `AUTO_RENEW`, the 3.32.1 value.
RenewalType = Literal["RENEW", "AUTO_RENEW", "NO_RENEW"]
TimeoutDecision = Literal["APPROVE", "DECLINE"]
DeliveryMethod = Literal["STANDARD_DELIVERY", "REGISTERED_MAIL", "COURIER", "FIRST_CLASS_MAIL"]


class BillingAddress(Wire):
    addressLine1: Annotated[str, StringConstraints(min_length=1, max_length=150)]
    addressLine2: Annotated[str, StringConstraints(max_length=150)] | None = None
    city: Annotated[str, StringConstraints(min_length=1, max_length=50)]
    postCode: PostCode
    state: Annotated[str, StringConstraints(max_length=50)] | None = None
    country: Country


class DeliveryAddress(Wire):
    name: Annotated[str, StringConstraints(min_length=1, max_length=100)]
    surname: Annotated[str, StringConstraints(min_length=1, max_length=100)]
    addressLine1: Annotated[str, StringConstraints(min_length=1, max_length=50)]
    addressLine2: Annotated[str, StringConstraints(min_length=1, max_length=50)] | None = None
    city: Annotated[str, StringConstraints(min_length=1, max_length=20)]
    postCode: PostCode
    state: Annotated[str, StringConstraints(max_length=50)] | None = None
    country: Country


class DigitalWallets(Wire):
    """Accepted in shape; wallets are switched off in every programme (D18)."""

    walletsEnabled: bool | None = None
    pushProvisioningEnabled: bool | None = None
    artworkReference: Annotated[str, StringConstraints(max_length=100)] | None = None


# What each mode needs beyond the common fields (cards.md §3.3: `PrepaidModeCardRequest`,
# `DebitModeCardRequest`, flat in the body), as the description says it.
_MODE_NEEDS = {"PREPAID_MODE": "currency", "DEBIT_MODE": "parentManagedAccountId"}
_MODE_REQUIRED: JsonDict = {
    "allOf": [
        {
            "if": {"properties": {"mode": {"const": mode}}, "required": ["mode"]},
            "then": {"required": [field], "properties": {field: {"not": {"type": "null"}}}},
        }
        for mode, field in _MODE_NEEDS.items()
    ]
}


class ManagedCardCreate(Wire):
    """Prepaid cards name `currency`, debit cards `parentManagedAccountId`; the other mode's
    field is ignored (D28). The one a mode needs, missing or null, is a 400 naming it
    (`REQUIRED`)."""

    model_config = ConfigDict(json_schema_extra=_MODE_REQUIRED)

    profileId: DigitsId
    tag: Tag | None = None
    friendlyName: FriendlyName
    nameOnCard: NameOnCard
    nameOnCardLine2: NameOnCardLine2 | None = None
    cardholderMobileNumber: CardholderMobile
    billingAddress: BillingAddress
    digitalWallets: DigitalWallets | None = None
    authForwardingDefaultTimeoutDecision: TimeoutDecision | None = None
    mode: Mode
    # Checked after `mode` (declared before them), even when absent, so that the error names
    # the field a client must add.
    currency: Annotated[
        Currency | None,
        Field(validate_default=True, description="Required for a `PREPAID_MODE` card."),
    ] = None
    parentManagedAccountId: Annotated[
        DigitsId | None,
        Field(validate_default=True, description="Required for a `DEBIT_MODE` card."),
    ] = None
    renewalType: RenewalType | None = None

    @field_validator("currency", "parentManagedAccountId", mode="after")
    @classmethod
    def _the_mode_needs_it(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None and _MODE_NEEDS.get(info.data.get("mode", "")) == info.field_name:
            raise PydanticCustomError("missing", "Field required")
        return value


class ManagedCardUpdate(Wire):
    """Every field optional; only those sent change. `nameOnCard` null or empty changes
    nothing (observed)."""

    tag: Tag | None = None
    friendlyName: FriendlyName | None = None
    nameOnCard: Annotated[str, StringConstraints(pattern=NAME_ON_CARD, max_length=27)] | None = None
    nameOnCardLine2: NameOnCardLine2 | None = None
    cardholderMobileNumber: CardholderMobile | None = None
    billingAddress: BillingAddress | None = None
    deliveryAddress: DeliveryAddress | None = None
    deliveryMethod: DeliveryMethod | None = None
    digitalWallets: DigitalWallets | None = None
    authForwardingDefaultTimeoutDecision: TimeoutDecision | None = None
    renewalType: RenewalType | None = None


class CardNumberToken(BaseModel):
    """The card number's token (D21a): never a card number (it has a letter)."""

    value: Annotated[str, StringConstraints(min_length=16, max_length=16)]


class CvvToken(BaseModel):
    """The CVV's token (D21a): never a CVV (it has a letter)."""

    value: Annotated[str, StringConstraints(min_length=3, max_length=3)]


InstrumentState = Literal["ACTIVE", "BLOCKED", "DESTROYED"]
BlockedReason = Literal["USER", "SYSTEM", "LOST"]
DestroyedReason = Literal["SYSTEM", "USER", "LOST", "STOLEN", "EXPIRED"]
# A reason is there only with its state (cards.md §2.3, D24).
_REASON_NEEDS_STATE: JsonDict = {
    "allOf": [
        {"if": {"required": [reason]}, "then": {"properties": {"state": {"const": state}}}}
        for reason, state in (("blockedReason", "BLOCKED"), ("destroyedReason", "DESTROYED"))
    ]
}


class CardState(BaseModel):
    """`blockedReason` only with `state` BLOCKED, `destroyedReason` only with DESTROYED."""

    model_config = ConfigDict(extra="ignore", json_schema_extra=_REASON_NEEDS_STATE)

    state: InstrumentState
    blockedReason: BlockedReason | None = None
    destroyedReason: DestroyedReason | None = None


class CardBalances(BaseModel):
    availableBalance: int
    actualBalance: int


class BillingAddressRead(BaseModel):
    addressLine1: str
    addressLine2: str | None = None
    city: str
    postCode: str
    state: str | None = None
    country: str


class DigitalWalletsRead(BaseModel):
    walletsEnabled: bool
    pushProvisioningEnabled: bool
    artworkReference: str | None = None


class Amount(BaseModel):
    currency: str
    amount: int


class AvailableToSpend(BaseModel):
    value: Amount
    interval: str


class DeliveryAddressRead(BaseModel):
    name: str
    surname: str
    addressLine1: str
    addressLine2: str | None = None
    city: str
    postCode: str
    state: str | None = None
    country: str


class ReplacementRead(BaseModel):
    replacementId: DigitsId
    replacementReason: Literal["DAMAGED", "LOST_STOLEN", "EXPIRED"] | None = None


class PhysicalCardDetailsRead(BaseModel):
    """Present once the card is upgraded (D25); `type` stays VIRTUAL until activation."""

    productReference: str | None = None
    carrierType: str | None = None
    pendingActivation: bool
    pinBlocked: bool
    manufacturingState: Literal["REQUESTED", "SENT_FOR_FULFILLMENT", "DISPATCHED", "DELIVERED"]
    replacement: ReplacementRead
    deliveryAddress: DeliveryAddressRead | None = None
    deliveryMethod: DeliveryMethod | None = None


class ManagedCardRead(BaseModel):
    """Prepaid cards carry `balances`; debit cards `parentManagedAccountId` and
    `availableToSpend`. `cardNumber` and `cvv` are tokens (D20, D21a)."""

    model_config = ConfigDict(
        json_schema_extra={
            "allOf": [
                {
                    "if": {"properties": {"mode": {"const": "PREPAID_MODE"}}},
                    "then": {"required": ["balances"]},
                },
                {
                    "if": {"properties": {"mode": {"const": "DEBIT_MODE"}}},
                    "then": {"required": ["parentManagedAccountId", "availableToSpend"]},
                },
            ]
        }
    )

    id: DigitsId
    profileId: DigitsId
    externalHandle: str
    tag: str | None = None
    friendlyName: str
    currency: str
    state: CardState
    type: Literal["VIRTUAL", "PHYSICAL"]
    cardBrand: Literal["MASTERCARD", "VISA"]
    cardNumber: CardNumberToken
    cvv: CvvToken
    cardNumberFirstSix: Annotated[str, StringConstraints(pattern=r"^[0-9]{6}$")]
    cardNumberLastFour: Annotated[str, StringConstraints(pattern=r"^[0-9]{4}$")]
    nameOnCard: str
    nameOnCardLine2: str | None = None
    startMmyy: str
    expiryMmyy: str
    cardLevelClassification: Literal["CONSUMER", "CORPORATE"]
    expiryPeriodMonths: int
    renewalType: Literal["AUTO_RENEW", "NO_RENEW"]
    creationTimestamp: int
    cardholderMobileNumber: str
    billingAddress: BillingAddressRead
    digitalWallets: DigitalWalletsRead
    mode: Mode
    balances: CardBalances | None = None
    parentManagedAccountId: DigitsId | None = None
    availableToSpend: list[AvailableToSpend] | None = None
    physicalCardDetails: PhysicalCardDetailsRead | None = None


class ManagedCardsPage(BaseModel):
    cards: list[ManagedCardRead]
    count: int
    responseCount: int


# Spend rules (cards.md §4.1, D22): a card's level, on the common rules of every level
# (`programmes.spend_rules`, the card profile's level being a programme setting).
SpendInterval = Literal["DAILY", "WEEKLY", "MONTHLY", "QUARTERLY", "YEARLY", "ALWAYS"]
TransactionBound = Annotated[int, Field(ge=0, le=2**63 - 1)]


class SpendLimitValue(Wire):
    model_config = ConfigDict(extra="forbid")

    currency: Currency
    # A negative amount is a 409 SPEND_LIMIT_AMOUNT_INVALID, not a 400 (observed, D22).
    amount: Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]


class SpendLimit(Wire):
    model_config = ConfigDict(extra="forbid")

    value: SpendLimitValue
    interval: SpendInterval


class CardLevelSpendRules(CommonLevelSpendRules):
    """Every field optional. On PATCH only the fields sent change, an empty list (or one of only
    nulls) clears that list, and a null changes nothing. An unknown key is a 400 (`NOT_IN`):
    read as no rule at all, a misspelt one would replace the card's rules with nothing. Rules
    that contradict each other are a 409 `SPEND_RULE_INVALID` (decision 0073)."""

    model_config = ConfigDict(extra="forbid")

    spendLimit: Annotated[list[SpendLimit | None], Field(max_length=50)] | None = None
    minTransactionAmount: TransactionBound | None = None
    maxTransactionAmount: TransactionBound | None = None


class SpendLimitRead(BaseModel):
    value: Amount
    interval: SpendInterval


class CardLevelSpendRulesRead(BaseModel):
    """`ManagedCardsSpendRules`: a card's own rules, as stored."""

    allowedMerchantCategories: list[str] | None = None
    blockedMerchantCategories: list[str] | None = None
    allowedMerchantIds: list[str] | None = None
    blockedMerchantIds: list[str] | None = None
    allowedMerchantCountries: list[str] | None = None
    blockedMerchantCountries: list[str] | None = None
    allowContactless: bool | None = None
    allowAtm: bool | None = None
    allowECommerce: bool | None = None
    allowCashback: bool | None = None
    allowCreditAuthorisations: bool | None = None
    spendLimit: list[SpendLimitRead] | None = None
    minTransactionAmount: int | None = None
    maxTransactionAmount: int | None = None


class AllLevelSpendRules(CardLevelSpendRulesRead):
    """The card level twice (at top level, the deprecated copy, and in `cardLevelSpendRules`),
    the card profile's level and the identity level (never set in this build, D22)."""

    cardLevelSpendRules: CardLevelSpendRulesRead
    profileLevelSpendRules: dict[str, Any]
    identityLevelSpendRules: dict[str, Any]
