"""The card simulator's payment operations (cards.md §6.1, D26), sandbox only, header
`programme-key`: purchase and merchant refund by card id or by card details, and each step of a
card payment on its own (authorise, settle, reverse, expire, refund). Every answer is 200
`{code, ...}`: a refusal is a `DENIED_*` code, never an error status; a malformed body is a 400."""

from __future__ import annotations

import hmac
from typing import Annotated, Any, Literal, cast

from fastapi import Body, Depends, Path
from pydantic import BaseModel, Field, StringConstraints
from sqlalchemy import bindparam, select

from multibank.api.deps import AppContainer, Db
from multibank.api.routing import UnitOfWorkRouter
from multibank.cards import lifecycle, money, physical
from multibank.cards.models import ManagedCard
from multibank.kernel.carddata import CardKeyring
from multibank.kernel.validation import parse_id
from multibank.kernel.wire import StrictBody
from multibank.programmes.context import Ctx
from multibank.programmes.models import Profile
from multibank.simulator.deps import CardSimulatorIdempotent, RememberedSimulatorProgramme

router = UnitOfWorkRouter(tags=["Simulator"])


async def _ctx(db: Db, programme: RememberedSimulatorProgramme, container: AppContainer) -> Ctx:
    return Ctx(db, programme, container.clock.now_ms(programme.clock_offset_ms))


SimCtx = Annotated[Ctx, Depends(_ctx)]
CardPath = Annotated[str, Path(pattern=r"^[0-9]+$", max_length=19)]
AuthorisationPath = Annotated[str, Path(pattern=r"^[0-9]+$", max_length=19)]
Text50 = Annotated[str, StringConstraints(min_length=1, max_length=50)]
Text100 = Annotated[str, StringConstraints(max_length=100)]


class Request(StrictBody):
    """Simulator request bodies take JSON types as declared."""


class CurrencyAmount(Request):
    currency: Annotated[str, StringConstraints(pattern=r"^[A-Z]{3}$")]
    amount: int | None = Field(
        default=None,
        ge=-(2**63),
        le=2**63 - 1,
        description="Minor units. Zero or less answers `DENIED_AMOUNT_NOT_POSITIVE`; more than "
        f"{money.MAX_AMOUNT} answers `DENIED_OTHER`; nothing moves.",
    )


class AdditionalMerchantData(Request):
    merchantStreet: Text100 | None = None
    merchantCity: Text100 | None = None
    merchantState: Text100 | None = None
    merchantPostalCode: Text100 | None = None
    merchantCountry: Annotated[str, StringConstraints(max_length=3)] | None = None
    merchantTelephone: Text100 | None = None
    merchantURL: Text100 | None = None
    merchantNameOther: Text100 | None = None
    merchantNetworkId: Text100 | None = None
    merchantContact: Text100 | None = None


class Purchase(Request):
    merchantName: Text50
    merchantId: Annotated[str, StringConstraints(min_length=1, max_length=15)] | None = Field(
        default=None, description="Random 9 digits when absent."
    )
    merchantCategoryCode: Annotated[str, StringConstraints(max_length=4)] | None = Field(
        default=None, description="`5399` when absent or not 4 digits; `6011` for an ATM."
    )
    transactionAmount: CurrencyAmount
    transactionCountry: Annotated[str, StringConstraints(max_length=3)] | None = Field(
        default=None, description="ISO 3166 alpha-3 (`MLT` when absent); shown as alpha-2."
    )
    forexFee: CurrencyAmount | None = Field(default=None, description="Deprecated, ignored.")
    forexPadding: CurrencyAmount | None = Field(default=None, description="Deprecated, ignored.")
    atmWithdrawal: bool | None = None
    additionalMerchantData: AdditionalMerchantData | None = None
    cardHolderPresent: Literal["PRESENT", "NOT_PRESENT", "PRESENCE_UNKNOWN"] | None = None
    cardPresent: bool | None = None
    initiateBiometricThreeDSecure: bool | None = Field(
        default=None, description="Ignored: no purchase is challenged (D18)."
    )
    transactionTimestamp: int | None = None
    pin: Annotated[str, StringConstraints(pattern=r"^[0-9]{4}$")] | None = Field(
        default=None,
        description="A multibank extension (D25): the PIN entered at the terminal of a "
        "card-present purchase (`cardPresent` true), 4 digits; ignored otherwise. A wrong PIN "
        "answers `DENIED_OTHER` (webhook `declineReason` `PIN_CHECKS_FAILED`); the third wrong "
        "PIN in a row blocks the card's PIN (`pinBlocked`, `PIN_RETRIES_EXCEEDED`) until it is "
        "unblocked; a right PIN sets the count back. Without it, no PIN is checked.",
    )


class CardDetails(Request):
    cardNumber: Annotated[str, StringConstraints(min_length=16, max_length=50)]
    cvv: Annotated[str, StringConstraints(min_length=1, max_length=4)]
    expiryDate: Annotated[str, StringConstraints(pattern=r"^[0-9]{4}$")]


class PurchaseByDetails(Purchase, CardDetails):
    """A purchase naming the card by its number, CVV and expiry (MMYY)."""


class Refund(Purchase):
    relatedSettlementId: (
        Annotated[str, StringConstraints(pattern=r"^[0-9]+$", max_length=19)] | None
    ) = None


class StepAmount(Request):
    transactionAmount: CurrencyAmount | None = None


class ThreeDSecureChallenge(BaseModel):
    hasValue: bool = False


CardAnswerCode = Literal[
    "APPROVED",
    "COMPLETED",
    "DENIED_NOT_ENOUGH_FUNDS",
    "DENIED_CARD_NOT_FOUND",
    "DENIED_INCORRECT_CVV",
    "DENIED_CARD_EXPIRY",
    "DENIED_AMOUNT_NOT_POSITIVE",
    "DENIED_CARD_INACTIVE",
    "DENIED_OTHER",
    "DENIED_SPEND_CONTROL",
    "DENIED_AUTHORISATION_NOT_FOUND",
    "DENIED_AUTHORISATION_NOT_PENDING",
]


class CardCode(BaseModel):
    """`code` and, beyond the reference, the ids of what was recorded (D26)."""

    code: CardAnswerCode
    authorisationId: str | None = None
    settlementId: str | None = None
    reversalId: str | None = None
    refundId: str | None = None
    threeDSecureChallengeId: ThreeDSecureChallenge | None = None


def _answer(outcome: money.Outcome, challenge: bool = False) -> CardCode:
    def text(value: int | None) -> str | None:
        return None if value is None else str(value)

    return CardCode(
        code=cast(CardAnswerCode, outcome.code),
        authorisationId=text(outcome.authorisation_id),
        settlementId=text(outcome.settlement_id),
        reversalId=text(outcome.reversal_id),
        refundId=text(outcome.refund_id),
        threeDSecureChallengeId=ThreeDSecureChallenge() if challenge else None,
    )


def _pin_matches(body: Purchase, card: ManagedCard | None, keys: CardKeyring | None) -> bool | None:
    """Whether a card-present purchase's `pin` is the card's (compared in constant time); None
    when there is nothing to compare (no PIN given, not present, or a card without a PIN)."""
    if body.pin is None or not body.cardPresent or card is None or keys is None:
        return None
    if card.pin_encrypted is None:
        return None
    pin = keys.decrypt(card.pin_encrypted, card.id, physical.PIN_LABEL)
    return hmac.compare_digest(pin.encode(), body.pin.encode())


def _attempt(
    body: Purchase, card: ManagedCard | None = None, keys: CardKeyring | None = None
) -> money.Attempt:
    extra: dict[str, str] = {}
    if body.additionalMerchantData is not None:
        extra = body.additionalMerchantData.model_dump(exclude_none=True)
    return money.Attempt(
        currency=body.transactionAmount.currency,
        amount=body.transactionAmount.amount or 0,
        merchant_name=body.merchantName,
        merchant_id=body.merchantId,
        merchant_category_code=body.merchantCategoryCode,
        country_alpha3=body.transactionCountry,
        atm=bool(body.atmWithdrawal),
        card_present=bool(body.cardPresent),
        cardholder_present=body.cardHolderPresent,
        extra_merchant=extra,
        pin_matches=_pin_matches(body, card, keys),
    )


async def _as_the_clock_has_it(ctx: Ctx, card: ManagedCard | None) -> ManagedCard | None:
    """The card after the lifecycle steps the programme clock has made due (D24): a renewing
    card past its expiry is renewed before it pays, as a read of it would show it."""
    if card is not None and lifecycle.is_due(ctx, card):
        await lifecycle.step(ctx, card)
    return card


# Built once with bound parameters: every card step of the simulator runs it. The card's row
# is locked with its profile's spend rules read beside it (D22; one round trip, decision 0060).
_CARD = (
    select(ManagedCard, Profile.spend_rules)
    .join(Profile, Profile.id == ManagedCard.profile_id)
    .where(
        ManagedCard.id == bindparam("card_id"),
        ManagedCard.programme_id == bindparam("programme_id"),
    )
    .with_for_update(of=ManagedCard)
    .execution_options(populate_existing=True)
)


async def card_and_rules(
    ctx: Ctx, card_id: str
) -> tuple[ManagedCard | None, dict[str, Any] | None]:
    """The programme's card, its row locked (an authorisation reads its spend, then decides),
    as the clock has it, and its profile's spend rules; another programme's card is not found
    (D26)."""
    number = parse_id(card_id)
    if number is None:
        return None, None
    params = {"card_id": number, "programme_id": ctx.programme.id}
    row = (await ctx.db.execute(_CARD, params)).one_or_none()
    if row is None:
        return None, None
    return await _as_the_clock_has_it(ctx, row[0]), dict(row[1] or {})


async def _card(ctx: Ctx, card_id: str) -> ManagedCard | None:
    return (await card_and_rules(ctx, card_id))[0]


async def _card_by_details(
    ctx: Ctx, container: Any, details: CardDetails
) -> tuple[ManagedCard | None, money.Decline | None]:
    """The card a number names (found by its keyed hash, D20), then D22 #2: the expiry, then
    the CVV."""
    number = details.cardNumber.replace(" ", "")
    if len(number) != 16 or not number.isdigit():
        return None, None
    keys = container.card_keys()
    stmt = (
        select(ManagedCard)
        .where(
            ManagedCard.programme_id == ctx.programme.id,
            ManagedCard.number_hash == keys.lookup_hash(number),
        )
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    card = await _as_the_clock_has_it(ctx, (await ctx.db.execute(stmt)).scalar_one_or_none())
    if card is None:
        return None, None
    if details.expiryDate != card.expiry_mmyy:
        return card, money.EXPIRY_FAILED
    if details.cvv != keys.cvv(number, card.expiry_mmyy, card.version):
        return card, money.CVV_FAILED
    return card, None


NOT_FOUND = money.Outcome(money.DENIED_CARD_NOT_FOUND)
PURCHASE_CODES = (
    "`APPROVED`, `DENIED_NOT_ENOUGH_FUNDS`, `DENIED_CARD_NOT_FOUND`, `DENIED_INCORRECT_CVV`, "
    "`DENIED_CARD_EXPIRY`, `DENIED_AMOUNT_NOT_POSITIVE`, `DENIED_CARD_INACTIVE`, `DENIED_OTHER`, "
    "`DENIED_SPEND_CONTROL`"
)
STEP_CODES = (
    "`COMPLETED`, `DENIED_CARD_NOT_FOUND`, `DENIED_AUTHORISATION_NOT_FOUND`, "
    "`DENIED_AUTHORISATION_NOT_PENDING`, `DENIED_AMOUNT_NOT_POSITIVE`, `DENIED_NOT_ENOUGH_FUNDS`"
)
ANSWER: dict[str, Any] = {
    "response_model_exclude_none": True,
    "dependencies": [CardSimulatorIdempotent],
}


@router.post(
    "/cards/{card_id}/purchase",
    operation_id="simulateCardPurchaseById",
    description=f"An authorisation and its full settlement, in one transaction. Codes: "
    f"{PURCHASE_CODES}; a refusal moves nothing.",
    **ANSWER,
)
async def purchase_by_id(
    card_id: CardPath, body: Purchase, ctx: SimCtx, container: AppContainer
) -> CardCode:
    card, profile_rules = await card_and_rules(ctx, card_id)
    if card is None:
        return _answer(NOT_FOUND, True)
    attempt = _attempt(body, card, container.card_keys())
    return _answer(await money.purchase(ctx, card, attempt, profile_rules=profile_rules), True)


@router.post(
    "/cards/purchase",
    operation_id="simulateCardPurchaseByDetails",
    description=f"A purchase by card number, CVV and expiry (MMYY). Codes: {PURCHASE_CODES}.",
    **ANSWER,
)
async def purchase_by_details(
    body: PurchaseByDetails, ctx: SimCtx, container: AppContainer
) -> CardCode:
    card, refused = await _card_by_details(ctx, container, body)
    if card is None:
        return _answer(NOT_FOUND, True)
    attempt = _attempt(body, card, container.card_keys())
    return _answer(await money.purchase(ctx, card, attempt, refused), True)


@router.post(
    "/cards/{card_id}/merchant_refund",
    operation_id="simulateCardMerchantRefundById",
    description="A purchase followed by its refund in full (as the reference does): the net "
    f"effect is minus the purchase and refund fees. Codes: {PURCHASE_CODES}.",
    **ANSWER,
)
async def merchant_refund_by_id(
    card_id: CardPath, body: Purchase, ctx: SimCtx, container: AppContainer
) -> CardCode:
    card = await _card(ctx, card_id)
    if card is None:
        return _answer(NOT_FOUND, True)
    attempt = _attempt(body, card, container.card_keys())
    return _answer(await money.merchant_refund(ctx, card, attempt), True)


@router.post(
    "/cards/merchant_refund",
    operation_id="simulateCardMerchantRefundByDetails",
    description=f"A merchant refund by card details. Codes: {PURCHASE_CODES}.",
    **ANSWER,
)
async def merchant_refund_by_details(
    body: PurchaseByDetails, ctx: SimCtx, container: AppContainer
) -> CardCode:
    card, refused = await _card_by_details(ctx, container, body)
    if card is None:
        return _answer(NOT_FOUND, True)
    attempt = _attempt(body, card, container.card_keys())
    return _answer(await money.merchant_refund(ctx, card, attempt, refused), True)


@router.post(
    "/cards/{card_id}/authorise",
    operation_id="simulateCardAuthorise",
    description="An authorisation only: the amount is held until it is settled, reversed or "
    f"expires (7 days on the programme clock). Codes: {PURCHASE_CODES}.",
    **ANSWER,
)
async def authorise(
    card_id: CardPath, body: Purchase, ctx: SimCtx, container: AppContainer
) -> CardCode:
    card = await _card(ctx, card_id)
    if card is None:
        return _answer(NOT_FOUND)
    outcome, _ = await money.authorise(ctx, card, _attempt(body, card, container.card_keys()))
    return _answer(outcome)


def _step_amount(body: StepAmount | None) -> int | None:
    """None (the default) without an amount; an amount of null is 0 (not positive)."""
    if body is None or body.transactionAmount is None:
        return None
    return body.transactionAmount.amount or 0


async def _authorisation(
    ctx: Ctx, card_id: str, authorisation_id: str
) -> tuple[ManagedCard | None, Any]:
    card = await _card(ctx, card_id)
    number = parse_id(authorisation_id)
    if card is None or number is None:
        return card, None
    return card, await money.locked_authorisation(ctx, card, number)


def _other_currency(body: StepAmount | None, currency: str) -> bool:
    return bool(body and body.transactionAmount and body.transactionAmount.currency != currency)


@router.post(
    "/cards/{card_id}/authorisations/{authorisation_id}/settle",
    operation_id="simulateCardSettle",
    description="Settles an authorisation: by default what it still holds; less releases the "
    "rest, more takes what the available balance covers. The purchase fee is charged, never "
    f"below a zero balance. Codes: {STEP_CODES}, `DENIED_OTHER` (another currency).",
    **ANSWER,
)
async def settle(
    card_id: CardPath,
    authorisation_id: AuthorisationPath,
    ctx: SimCtx,
    body: StepAmount | None = Body(default=None),
) -> CardCode:
    card, auth = await _authorisation(ctx, card_id, authorisation_id)
    if card is None:
        return _answer(NOT_FOUND)
    if auth is not None and _other_currency(body, auth.currency):
        return _answer(money.Outcome(money.DENIED_OTHER))
    return _answer(await money.settle(ctx, card, auth, _step_amount(body)))


@router.post(
    "/cards/{card_id}/authorisations/{authorisation_id}/reverse",
    operation_id="simulateCardReverse",
    description="Gives back part or (by default) all of what an authorisation holds; more than "
    f"it holds gives back all. Codes: {STEP_CODES}, `DENIED_OTHER` (another currency).",
    **ANSWER,
)
async def reverse(
    card_id: CardPath,
    authorisation_id: AuthorisationPath,
    ctx: SimCtx,
    body: StepAmount | None = Body(default=None),
) -> CardCode:
    card, auth = await _authorisation(ctx, card_id, authorisation_id)
    if card is None:
        return _answer(NOT_FOUND)
    if auth is not None and _other_currency(body, auth.currency):
        return _answer(money.Outcome(money.DENIED_OTHER))
    return _answer(await money.reverse(ctx, card, auth, _step_amount(body)))


@router.post(
    "/cards/{card_id}/authorisations/{authorisation_id}/expire",
    operation_id="simulateCardAuthorisationExpire",
    description=f"Releases what an authorisation holds as an expiry now. Codes: {STEP_CODES}.",
    **ANSWER,
)
async def expire(card_id: CardPath, authorisation_id: AuthorisationPath, ctx: SimCtx) -> CardCode:
    card, auth = await _authorisation(ctx, card_id, authorisation_id)
    if card is None:
        return _answer(NOT_FOUND)
    return _answer(await money.expire(ctx, card, auth))


@router.post(
    "/cards/{card_id}/refund",
    operation_id="simulateCardRefund",
    description="A refund from the merchant: at most what `relatedSettlementId` settled less "
    "its earlier refunds (`DENIED_NOT_ENOUGH_FUNDS` above that); without it a merchant credit. "
    f"The refund fee is charged from it. Codes: {STEP_CODES}, `DENIED_OTHER` (another currency).",
    **ANSWER,
)
async def refund(card_id: CardPath, body: Refund, ctx: SimCtx) -> CardCode:
    card = await _card(ctx, card_id)
    if card is None:
        return _answer(NOT_FOUND)
    related, settlement_id = None, None
    if body.relatedSettlementId is not None:
        settlement_id = parse_id(body.relatedSettlementId)
        related = (
            None
            if settlement_id is None
            else await money.settled_authorisation(ctx, card, settlement_id)
        )
        if related is None:
            return _answer(money.Outcome(money.DENIED_AUTHORISATION_NOT_FOUND))
    return _answer(await money.refund(ctx, card, _attempt(body), related, settlement_id))
