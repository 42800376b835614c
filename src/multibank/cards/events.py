"""The card webhooks of D27, in the legacy payload shapes of cards.md §7, written in the
transaction of the change that causes them (`webhooks.events.emit`). Each builder here is the one
place a card payload's shape is decided; every card event's resource is the card, so one card's
events are delivered in the order written.

Conventions (D27): ids and amounts are strings, nested ids are `{type: managed_cards, id}`,
timestamps are strings of epoch ms, `owner` is `{type: "corporates"|"consumers", id}`. No payload
carries more of the number than its first six and last four digits."""

from __future__ import annotations

from typing import Any

from multibank.cards.models import ManagedCard
from multibank.programmes.context import Ctx
from multibank.webhooks.events import emit, register

AUTHORISATIONS = "/managed_cards/authorisations/watch"
SETTLEMENTS = "/managed_cards/settlements/watch"
ADJUSTMENTS = "/managed_cards/adjustments/watch"
STATE_CHANGE = "/managed_cards/state_change/watch"
EXPIRIES = "/managed_cards/expiries/watch"
PHYSICAL_UPGRADE = "/managed_cards/physical_cards_upgrade/watch"
REPLACEMENT = "/managed_cards/replacement/watch"
PATHS = register(
    AUTHORISATIONS,
    SETTLEMENTS,
    ADJUSTMENTS,
    STATE_CHANGE,
    EXPIRIES,
    PHYSICAL_UPGRADE,
    REPLACEMENT,
)

# state_change event types (D27)
ENABLED, ACTIVATED, BLOCKED, UNBLOCKED, DESTROYED = (
    "ENABLED",
    "ACTIVATED",
    "BLOCKED",
    "UNBLOCKED",
    "DESTROYED",
)
# expiries event types
ABOUT_TO_EXPIRE, EXPIRED, RENEWED = "CARD_ABOUT_TO_EXPIRE", "CARD_EXPIRED", "CARD_RENEWED"


def card_ref(card: ManagedCard) -> dict[str, str]:
    return {"type": "managed_cards", "id": str(card.id)}


def owner_ref(card: ManagedCard) -> dict[str, str]:
    kind = "corporates" if card.identity_type == "CORPORATE" else "consumers"
    return {"type": kind, "id": str(card.identity_id)}


def money(currency: str, amount: int) -> dict[str, str]:
    """A legacy amount: a string, signed as the reference sends it (debits negative, D27)."""
    return {"currency": currency, "amount": str(amount)}


def renewal_wire(card: ManagedCard) -> str:
    # 3.32.1's enum writes a renewing card as AUTO_RENEW (D24).
    return "NO_RENEW" if card.renewal_type == "NO_RENEW" else "AUTO_RENEW"


def state_of(card: ManagedCard) -> dict[str, str]:
    out = {"state": card.state}
    if card.blocked_reason:
        out["blockedReason"] = card.blocked_reason
    if card.destroyed_reason:
        out["destroyedReason"] = card.destroyed_reason
    return out


def resource(card: ManagedCard) -> str:
    return f"managed_cards:{card.id}"


async def state_change(ctx: Ctx, card: ManagedCard, event_type: str) -> None:
    """Block, unblock, remove, lost, stolen, expiry, activation, renewal-type change (D27)."""
    await emit(
        ctx,
        STATE_CHANGE,
        event_type,
        resource(card),
        {
            "id": card_ref(card),
            "timestamp": str(ctx.now),
            "eventType": event_type,
            "state": state_of(card),
            "cardType": card.type,
            "renewalType": renewal_wire(card),
        },
    )


async def expiry(
    ctx: Ctx, card: ManagedCard, event_type: str, renewal_timestamp: int | None = None
) -> None:
    """CARD_ABOUT_TO_EXPIRE, CARD_EXPIRED or CARD_RENEWED."""
    body: dict[str, Any] = {
        "id": card_ref(card),
        "eventType": event_type,
        "state": state_of(card),
        "cardType": card.type,
        "expiryMmyy": card.expiry_mmyy,
        "renewalType": renewal_wire(card),
    }
    if renewal_timestamp is not None:
        body["renewalTimestamp"] = str(renewal_timestamp)
    await emit(ctx, EXPIRIES, event_type, resource(card), body)


async def physical_upgrade(
    ctx: Ctx, card: ManagedCard, physical_card_details: dict[str, Any]
) -> None:
    """Each manufacturing step of an upgrade; `physical_card_details` is the card record's
    `physicalCardDetails` as the API returns it."""
    await emit(
        ctx,
        PHYSICAL_UPGRADE,
        str(physical_card_details.get("manufacturingState", "REQUESTED")),
        resource(card),
        {
            "id": card_ref(card),
            "physicalCardDetails": physical_card_details,
            "upgradedTimestamp": str(ctx.now),
        },
    )


async def replacement(
    ctx: Ctx,
    card: ManagedCard,
    replacement_id: int,
    reason: str,
    event_type: str = "PHYSICAL_REPLACEMENT",
) -> None:
    """A replacement of `card` (DAMAGED or LOST_STOLEN) by the card `replacement_id`."""
    await emit(
        ctx,
        REPLACEMENT,
        event_type,
        resource(card),
        {
            "eventType": event_type,
            "id": card_ref(card),
            "replacementId": str(replacement_id),
            "replacementReason": reason,
            "replacementTimestamp": str(ctx.now),
        },
    )


async def adjustment(
    ctx: Ctx,
    card: ManagedCard,
    transaction_id: int,
    adjustment_type: str,
    amount: int,
    available_balance: int | None,
) -> None:
    """A balance moved by the platform (LOST_STOLEN_REPLACEMENT_BALANCE_TRANSFER); `amount` is
    signed from the card's side."""
    body: dict[str, Any] = {
        "id": card_ref(card),
        "transactionId": str(transaction_id),
        "adjustmentType": adjustment_type,
        "adjustmentAmount": money(card.currency, amount),
        "transactionTimestamp": str(ctx.now),
        "owner": owner_ref(card),
    }
    if available_balance is not None:
        body["availableBalance"] = money(card.currency, available_balance)
        body["details"] = {
            "prepaidModeDetails": {"availableBalance": money(card.currency, available_balance)}
        }
    await emit(ctx, ADJUSTMENTS, adjustment_type, resource(card), body)


# The authorisation and settlement events (AUTHORISATIONS, SETTLEMENTS) are built by the card
# payment steps below this line.


def _merchant_data(merchant: dict[str, Any]) -> dict[str, Any]:
    data = {
        "merchantName": merchant["merchantName"],
        "merchantCategoryCode": merchant["merchantCategoryCode"],
        "merchantId": merchant["merchantId"],
        "merchantCountry": merchant["merchantTerminalCountry"],
    }
    data.update(merchant.get("extra") or {})
    return data


# Over 8 parameters: the fields every card payment event carries (cards.md §4).
def _payment_common(
    ctx: Ctx,
    card: ManagedCard,
    transaction_id: int,
    amount: int,
    merchant: dict[str, Any],
    auth_code: str,
    available_balance: int | None,
    available_to_spend: list[dict[str, Any]] | None,
    currency: str | None = None,
) -> dict[str, Any]:
    """The fields an authorisation and a settlement event share (cards.md §7, D27): the
    prepaid card's available balance after the step, or for a debit card "0" and its
    availableToSpend in `details.debitModeDetails`. `currency`: the transaction's, when it is
    not the card's (a declined attempt in another currency)."""
    body: dict[str, Any] = {
        "id": card_ref(card),
        "transactionId": str(transaction_id),
        "transactionAmount": money(currency or card.currency, amount),
        "transactionTimestamp": str(ctx.now),
        "sourceAmount": money(currency or card.currency, amount),
        "merchantData": _merchant_data(merchant),
        "merchantName": merchant["merchantName"],
        "merchantCategoryCode": merchant["merchantCategoryCode"],
        "merchantId": merchant["merchantId"],
        "merchantCountryCode": merchant["merchantTerminalCountry"],
        "owner": owner_ref(card),
        "authCode": auth_code,
        "forexFee": money(card.currency, 0),
        "availableBalance": money(card.currency, available_balance or 0),
    }
    if available_to_spend is None:
        body["details"] = {
            "prepaidModeDetails": {"availableBalance": money(card.currency, available_balance or 0)}
        }
    else:
        body["details"] = {
            "debitModeDetails": {
                "parentManagedAccountId": str(card.parent_account_id),
                "availableToSpend": [
                    {
                        "availableAmount": limit["value"]["amount"],
                        "value": limit["value"],
                        "interval": limit["interval"],
                    }
                    for limit in available_to_spend
                ],
            }
        }
    return body


# Over 8 parameters: the authorisation event's own fields, named at every call (cards.md §4).
async def authorisation(
    ctx: Ctx,
    card: ManagedCard,
    *,
    transaction_id: int,
    authorisation_type: str,
    amount: int,
    merchant: dict[str, Any],
    approved: bool,
    decline_reason: str,
    rule_failed: str,
    auth_code: str,
    available_balance: int | None,
    available_to_spend: list[dict[str, Any]] | None,
    related_authorisation_id: int | None,
    currency: str | None = None,
) -> None:
    """Every authorisation attempt, approved (AUTHORISED) or not (DECLINED), and each reversal
    (ONLINE_REVERSE) or expiry (EXPIRED) of a hold; `amount` is signed from the cardholder's
    side (a purchase of 100 is -100, its reversal +100)."""
    body = _payment_common(
        ctx,
        card,
        transaction_id,
        amount,
        merchant,
        auth_code,
        available_balance,
        available_to_spend,
        currency,
    )
    related = "0" if related_authorisation_id is None else str(related_authorisation_id)
    body.update(
        {
            "approved": approved,
            "declineReason": decline_reason,
            "authRuleFailedReason": rule_failed,
            "authorisationType": authorisation_type,
            "authorisationCategory": "FINAL_AUTH",
            "relatedAuthorisationId": related,
            "relatedAuthorisationIds": [] if related_authorisation_id is None else [related],
            "cardholderPresent": merchant.get("cardholderPresent", "PRESENT"),
            "cardPresent": bool(merchant.get("cardPresent", False)),
            "forexPadding": money(card.currency, 0),
            "transactionType": merchant.get("merchantTransactionType", "SALE_PURCHASE"),
        }
    )
    await emit(ctx, AUTHORISATIONS, authorisation_type, resource(card), body)


# Over 8 parameters: the settlement event's own fields, named at every call (cards.md §4).
async def settlement(
    ctx: Ctx,
    card: ManagedCard,
    *,
    transaction_id: int,
    settlement_type: str,
    amount: int,
    fee: int,
    merchant: dict[str, Any],
    auth_code: str,
    available_balance: int | None,
    available_to_spend: list[dict[str, Any]] | None,
    related_authorisation_id: int | None,
    related_settlement_id: int | None,
) -> None:
    """A settlement (SALE_PURCHASE, CASH_WITHDRAWAL) or a refund (PURCHASE_REFUND), always
    COMPLETED; `amount` signed from the cardholder's side, `feeAmount` what this step charged."""
    body = _payment_common(
        ctx,
        card,
        transaction_id,
        amount,
        merchant,
        auth_code,
        available_balance,
        available_to_spend,
    )
    auth = "0" if related_authorisation_id is None else str(related_authorisation_id)
    settled = "0" if related_settlement_id is None else str(related_settlement_id)
    body.update(
        {
            "settlementType": settlement_type,
            "relatedAuthorisationId": auth,
            "relatedAuthorisationIds": [] if related_authorisation_id is None else [auth],
            "relatedSettlementId": settled,
            "relatedSettlementIds": [] if related_settlement_id is None else [settled],
            "feeAmount": money(card.currency, fee),
            "state": "COMPLETED",
        }
    )
    await emit(ctx, SETTLEMENTS, settlement_type, resource(card), body)
