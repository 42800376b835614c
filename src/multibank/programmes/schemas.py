"""Operator-facing shapes of programmes, keys, profiles and fee types (portal API and CLI)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    WithJsonSchema,
    field_validator,
)

from multibank.kernel.money import ISO_4217, is_currency
from multibank.kernel.wire import StrictBody
from multibank.programmes.spend_rules import ProfileSpendRules

# The description lists the ISO-4217 codes, so a generated client (or a fuzzer) knows that
# `AAA`, which has the right shape, is no currency.
CurrencyCode = Annotated[
    str,
    StringConstraints(pattern=r"^[A-Z]{3}$"),
    WithJsonSchema({"type": "string", "enum": sorted(ISO_4217)}),
]
FeeGroupName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{1,50}$")]
# A fee is at most 2^53 - 1 minor units: the largest integer every JSON client (JavaScript's
# numbers, a JSON Schema validator's doubles) reads exactly.
MAX_FEE = 2**53 - 1
Amount = Annotated[int, Field(ge=0, le=MAX_FEE)]
FeeAmounts = Annotated[
    dict[FeeGroupName, dict[CurrencyCode, Amount]],
    # pydantic describes a constrained key with patternProperties, which admits any other key
    # with any value; every key of both levels is constrained, so say so.
    WithJsonSchema(
        {
            "type": "object",
            "minProperties": 1,
            "propertyNames": {"pattern": r"^[A-Za-z0-9_-]{1,50}$"},
            "additionalProperties": {
                "type": "object",
                "propertyNames": {"enum": sorted(ISO_4217)},
                "additionalProperties": {"type": "integer", "minimum": 0, "maximum": MAX_FEE},
            },
        }
    ),
]
ProfileKind = Literal[
    "corporate",
    "consumer",
    "corporateManagedAccount",
    "consumerManagedAccount",
    "transfers",
    "sends",
    "outgoingWireTransfers",
    "linkedAccounts",
]
# A movement profile's fee per currency, in minor units (D12).
MovementFees = Annotated[
    dict[CurrencyCode, Amount],
    WithJsonSchema(
        {
            "type": "object",
            "propertyNames": {"enum": sorted(ISO_4217)},
            "additionalProperties": {"type": "integer", "minimum": 0, "maximum": MAX_FEE},
        }
    ),
]
DEFAULT_CURRENCIES = ("EUR", "GBP", "USD")


def _check_currencies(values: list[str]) -> list[str]:
    unknown = [c for c in values if not is_currency(c)]
    if unknown:
        raise ValueError(f"not ISO-4217 currencies: {', '.join(unknown)}")
    return sorted(set(values))


class _Strict(StrictBody):
    """Operator requests: unknown fields and wrong JSON types (`"stepUpRequired": 0`) are 400."""

    model_config = ConfigDict(extra="forbid", strict=True)


MINOR_UNITS_MAX = 2**53  # amounts a JSON client reads exactly
# An http(s) URL in printable ASCII (an international host is written in its punycode form).
WebhookUrl = Annotated[str, StringConstraints(pattern=r"^https?://[!-~]+$", max_length=2000)]


class ProgrammeSettings(_Strict):
    stepUpRequired: bool = False
    failedLoginLimit: int = Field(default=5, ge=1, le=100)
    ibanAllocationDelaySeconds: int = Field(default=2, ge=0, le=86400)
    passwordExpiryDays: int | None = Field(default=None, ge=1, le=3650)
    # Payments (D13, D14).
    sendsScaRequired: bool = True
    owtScaRequired: bool = True
    scaChallengeLimit: int = Field(default=5, ge=1, le=100)
    lowValueExemptionMaxAmount: int = Field(default=3000, ge=0, le=MINOR_UNITS_MAX)
    lowValueExemptionMaxCount: int = Field(default=5, ge=0, le=1000)
    lowValueExemptionMaxTotal: int = Field(default=10000, ge=0, le=MINOR_UNITS_MAX)
    owtProcessingDelaySeconds: int = Field(default=2, ge=0, le=86400)
    # Webhooks (D16): events are POSTed to this URL joined with their path; none: no delivery.
    webhookUrl: WebhookUrl | None = None


class ProgrammeSettingsUpdate(_Strict):
    stepUpRequired: bool | None = None
    failedLoginLimit: int | None = Field(default=None, ge=1, le=100)
    ibanAllocationDelaySeconds: int | None = Field(default=None, ge=0, le=86400)
    passwordExpiryDays: int | None = Field(default=None, ge=1, le=3650)
    sendsScaRequired: bool | None = None
    owtScaRequired: bool | None = None
    scaChallengeLimit: int | None = Field(default=None, ge=1, le=100)
    lowValueExemptionMaxAmount: int | None = Field(default=None, ge=0, le=MINOR_UNITS_MAX)
    lowValueExemptionMaxCount: int | None = Field(default=None, ge=0, le=1000)
    lowValueExemptionMaxTotal: int | None = Field(default=None, ge=0, le=MINOR_UNITS_MAX)
    owtProcessingDelaySeconds: int | None = Field(default=None, ge=0, le=86400)
    # `null` removes it (no more delivery).
    webhookUrl: WebhookUrl | None = None


class ProgrammeCreate(ProgrammeSettings):
    name: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]{1,100}$")]
    mode: Literal["sandbox", "live"] = "sandbox"
    currencies: list[CurrencyCode] = Field(
        default_factory=lambda: list(DEFAULT_CURRENCIES), min_length=1
    )

    _currencies = field_validator("currencies")(_check_currencies)


class ProgrammeProfiles(BaseModel):
    corporate: str
    consumer: str
    corporateManagedAccount: str
    consumerManagedAccount: str
    transfers: str
    sends: str
    outgoingWireTransfers: str
    corporatePrepaidManagedCard: str
    corporateDebitManagedCard: str
    consumerPrepaidManagedCard: str
    consumerDebitManagedCard: str
    linkedAccounts: str


class MovementFeesRead(BaseModel):
    """`movementFees` of D12: the fee of each payment kind per currency, in minor units."""

    transfers: dict[str, int]
    sends: dict[str, int]
    outgoingWireTransfers: dict[str, int]


class CardFeesRead(BaseModel):
    """`cardFees` of D19: each card fee per currency of the programme, in minor units."""

    purchase: dict[str, int]
    refund: dict[str, int]
    atmWithdrawal: dict[str, int]


class CardFeeWrite(_Strict):
    """The card fees to change; each kind names the currencies whose fee changes (D19)."""

    purchase: MovementFees | None = None
    refund: MovementFees | None = None
    atmWithdrawal: MovementFees | None = None


class ProgrammeDescription(BaseModel):
    """The exact JSON shape of D4, printed by the CLI and answered by the portal API."""

    programmeId: str
    apiKey: str | None
    profiles: ProgrammeProfiles
    currencies: list[str]
    feeTypes: dict[str, dict[str, dict[str, int]]]
    movementFees: MovementFeesRead
    # D19, D33: what a purchase, a refund and an ATM withdrawal cost, per currency.
    cardFees: CardFeesRead


class ProgrammeRead(BaseModel):
    programmeId: str
    name: str
    mode: str
    settings: ProgrammeSettings
    profiles: ProgrammeProfiles
    currencies: list[str]
    feeTypes: dict[str, dict[str, dict[str, int]]]
    movementFees: MovementFeesRead
    cardFees: CardFeesRead
    creationTimestamp: int


class ApiKeyCreate(_Strict):
    label: Annotated[str, StringConstraints(max_length=100)] | None = None


class ApiKeyRead(BaseModel):
    id: str
    prefix: str
    label: str | None
    creationTimestamp: int
    revokedTimestamp: int | None


class ApiKeyCreated(ApiKeyRead):
    apiKey: str


class ProfileCreate(_Strict):
    kind: ProfileKind
    currencies: list[CurrencyCode] = Field(min_length=1)
    active: bool = True
    # Movement kinds only; a currency of the profile not named here costs 0.
    fees: MovementFees | None = None

    _currencies = field_validator("currencies")(_check_currencies)


class ProfileUpdate(_Strict):
    currencies: list[CurrencyCode] | None = Field(default=None, min_length=1)
    active: bool | None = None
    # Outgoing wire transfer profiles only.
    returnFeeRefunded: bool | None = None
    # Movement kinds only: the fees named change, the others stay.
    fees: MovementFees | None = None
    # Card profiles only: the profile-level spend rules (D22), replaced as a whole; `{}` clears.
    spendRules: ProfileSpendRules | None = None

    @field_validator("currencies")
    @classmethod
    def _check(cls, v: list[str] | None) -> list[str] | None:
        return None if v is None else _check_currencies(v)


class ProfileRead(BaseModel):
    id: str
    kind: str
    currencies: list[str]
    active: bool
    # Movement kinds: the fee of each of the profile's currencies (D12); other kinds: none.
    fees: dict[str, int] | None = None
    # Outgoing wire transfer profiles: whether a return gives the fee back (D14).
    returnFeeRefunded: bool | None = None
    # Card profiles: the profile-level spend rules, `{}` when none are set (D22).
    spendRules: dict[str, Any] | None = None


class FeeTypeWrite(_Strict):
    """Amounts per fee group and currency, in minor units; `DEFAULT` serves identities with none."""

    amounts: FeeAmounts = Field(min_length=1)

    @field_validator("amounts")
    @classmethod
    def _check(cls, v: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
        for group in v.values():
            _check_currencies(list(group))
        return v


class FeeTypeCreate(FeeTypeWrite):
    name: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{1,50}$")]


class FeeTypeRead(BaseModel):
    name: str
    amounts: dict[str, dict[str, int]]
