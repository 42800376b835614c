"""Card payments, black-box over HTTP through the card simulator (cards.md §5, §6.1, §7;
decisions D22, D23, D26, D27): purchases on prepaid and debit cards with their fee and
availableToSpend, each decline of D22's table, authorise → settle / reverse / expire, refunds
with their cap, merchant refunds, purchases by card details, the webhooks of each step, and a
ledger that verifies clean afterwards."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from multibank.cards import money_steps
from multibank.cards.authorisations import CardAuthorisation
from multibank.cards.models import ManagedCard
from multibank.cards.money import window_start
from multibank.kernel.carddata import CardKeyring
from multibank.ledger import service as ledger
from multibank.ledger.models import SETTLEMENT
from multibank.programmes import due
from multibank.programmes.card_fees import with_fee
from multibank.programmes.models import Programme
from tests.api.test_managed_cards import LATEST, create, get
from tests.api.test_webhooks import deliver, hooked  # noqa: F401 (the fixture)
from tests.api.webhook_support import signed_by
from tests.conftest import Prog
from tests.factories import Identity, deposit, login, open_account, verified

SIM = "/simulate/api"
FEE = 10  # a new programme's purchase fee in every currency (D19)
AUTHORISATIONS = "/hooks/managed_cards/authorisations/watch"
SETTLEMENTS = "/hooks/managed_cards/settlements/watch"


def sim(p: Prog) -> dict[str, str]:
    return {"programme-key": p.api_key}


async def advance(client: httpx.AsyncClient, ident: Identity, seconds: int) -> None:
    """Moves the programme clock on, then logs in again (the session has timed out)."""
    r = await client.post(f"{SIM}/clock/advance", headers=sim(ident.p), json={"seconds": seconds})
    assert r.status_code == 200, r.text
    r = await login(client, ident.p, ident.email)
    assert r.status_code == 200, r.text
    ident.token = r.json()["token"]


def buy(amount: int, currency: str = "EUR", **over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "merchantName": "Amazon IT",
        "transactionAmount": {"currency": currency, "amount": amount},
    }
    body.update(over)
    return body


async def simulate(
    client: httpx.AsyncClient, p: Prog, path: str, body: dict[str, Any] | None = None
) -> dict[str, Any]:
    r = await client.post(f"{SIM}/cards/{path}", headers=sim(p), json=body)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


async def purchase(
    client: httpx.AsyncClient, p: Prog, card_id: str, amount: int, **over: Any
) -> dict[str, Any]:
    return await simulate(client, p, f"{card_id}/purchase", buy(amount, **over))


async def rules(client: httpx.AsyncClient, ident: Identity, card_id: str, **body: Any) -> None:
    r = await client.put(
        f"{LATEST}/managed_cards/{card_id}/spend_rules", headers=ident.headers, json=body
    )
    assert r.status_code == 200, r.text


def limit(amount: int, interval: str = "ALWAYS", currency: str = "EUR") -> dict[str, Any]:
    return {"value": {"currency": currency, "amount": amount}, "interval": interval}


async def debit(
    client: httpx.AsyncClient,
    p: Prog,
    ident: Identity,
    funds: int,
    limits: list[dict[str, Any]] | None = None,
    **rule: Any,
) -> tuple[dict[str, Any], str]:
    """A debit card on an EUR account holding `funds`, with spend limits (by default ALWAYS
    1000000)."""
    account = await open_account(client, ident, "EUR")
    if funds:
        assert await deposit(client, p, account["id"], funds) == "COMPLETED"
    card = await create(
        client, ident, mode="DEBIT_MODE", parentManagedAccountId=account["id"], currency=None
    )
    spend = limits if limits is not None else [limit(1_000_000)]
    if spend or rule:
        await rules(client, ident, card["id"], spendLimit=spend, **rule)
    return card, account["id"]


async def fund_prepaid(
    container: Any, p: Prog, card_id: str, amount: int, cur: str = "EUR"
) -> None:
    """Money onto a prepaid card's ledger account from the programme's settlement account (the
    transfers that fund cards are another slice's)."""
    async with container.db.transaction() as s:
        now = container.clock.system_ms()
        source = await ledger.system_account(s, int(p.id), SETTLEMENT, cur, now)
        await ledger.post(
            s,
            programme_id=int(p.id),
            type_="DEPOSIT",
            legs=[
                ledger.Leg(source, cur, -amount, -amount, guarded=False),
                ledger.Leg(int(card_id), cur, amount, amount),
            ],
            now_ms=now,
        )


async def prepaid(
    client: httpx.AsyncClient, container: Any, p: Prog, ident: Identity, funds: int, **rule: Any
) -> dict[str, Any]:
    card = await create(client, ident)
    if funds:
        await fund_prepaid(container, p, card["id"], funds)
    if rule:
        await rules(client, ident, card["id"], **rule)
    return card


async def set_card_fee(container: Any, p: Prog, kind: str, amount: int, cur: str = "EUR") -> None:
    async with container.db.transaction() as s:
        programme = await s.get(Programme, int(p.id))
        assert programme is not None
        programme.card_fees = with_fee(programme, kind, cur, amount)


async def balances(client: httpx.AsyncClient, ident: Identity, path: str) -> tuple[int, int]:
    r = await client.get(f"{LATEST}/{path}", headers=ident.headers)
    assert r.status_code == 200, r.text
    b = r.json()["balances"]
    return b["availableBalance"], b["actualBalance"]


async def to_spend(client: httpx.AsyncClient, ident: Identity, card_id: str) -> list[Any]:
    card = await get(client, ident, card_id)
    return [(x["interval"], x["value"]["amount"]) for x in card["availableToSpend"]]


async def ledger_ok(client: httpx.AsyncClient, admin_headers: dict[str, str], p: Prog) -> None:
    r = await client.get(f"/portal/api/programmes/{p.id}/ledger/verify", headers=admin_headers)
    assert r.status_code == 200, r.text
    assert r.json() == {"ok": True, "violations": []}


# Purchases


async def test_a_prepaid_purchase_takes_amount_and_fee_from_both_balances(
    client, container, programme, admin_headers
):
    p = await programme()
    ident = await verified(client, p)
    card = await prepaid(client, container, p, ident, 1000)
    answer = await purchase(client, p, card["id"], 100)
    assert answer["code"] == "APPROVED"
    assert answer["authorisationId"].isdigit() and answer["settlementId"].isdigit()
    assert await balances(client, ident, f"managed_cards/{card['id']}") == (890, 890)
    # Until the balance no longer covers a purchase: refused, nothing moves.
    answer = await purchase(client, p, card["id"], 891)
    assert answer == {
        "code": "DENIED_NOT_ENOUGH_FUNDS",
        "threeDSecureChallengeId": {"hasValue": False},
    }
    assert await balances(client, ident, f"managed_cards/{card['id']}") == (890, 890)
    # The fee never takes a balance below zero: what is left of it is charged (D23).
    assert (await purchase(client, p, card["id"], 885))["code"] == "APPROVED"
    assert await balances(client, ident, f"managed_cards/{card['id']}") == (0, 0)
    await ledger_ok(client, admin_headers, p)


async def test_a_debit_purchase_spends_the_parent_account_and_the_limit(
    client, programme, admin_headers
):
    p = await programme()
    ident = await verified(client, p)
    card, account_id = await debit(client, p, ident, 1000, [limit(500, "DAILY"), limit(700)])
    assert await to_spend(client, ident, card["id"]) == [("DAILY", 500), ("ALWAYS", 700)]
    assert (await purchase(client, p, card["id"], 100))["code"] == "APPROVED"
    assert await balances(client, ident, f"managed_accounts/{account_id}") == (890, 890)
    assert await to_spend(client, ident, card["id"]) == [("DAILY", 390), ("ALWAYS", 590)]
    # Over the daily window's rest: refused by the spend limit, nothing moves.
    assert (await purchase(client, p, card["id"], 391))["code"] == "DENIED_SPEND_CONTROL"
    # Leaving the limit exactly at 0 is approved (cards.md §5.4).
    assert (await purchase(client, p, card["id"], 390))["code"] == "APPROVED"
    assert await to_spend(client, ident, card["id"]) == [("DAILY", -10), ("ALWAYS", 190)]
    # A day later the daily window is new; the lifetime one is not.
    await advance(client, ident, 86400)
    assert await to_spend(client, ident, card["id"]) == [("DAILY", 500), ("ALWAYS", 190)]
    assert (await purchase(client, p, card["id"], 191))["code"] == "DENIED_SPEND_CONTROL"
    assert await balances(client, ident, f"managed_accounts/{account_id}") == (490, 490)
    listed = await client.get(f"{LATEST}/managed_cards", headers=ident.headers)
    assert listed.json()["cards"][0]["availableToSpend"][1]["value"]["amount"] == 190
    await ledger_ok(client, admin_headers, p)


async def test_a_debit_card_without_a_limit_spends_nothing(client, programme):
    p = await programme()
    ident = await verified(client, p)
    card, account_id = await debit(client, p, ident, 1000, limits=[])
    assert await to_spend(client, ident, card["id"]) == [("ALWAYS", 0)]
    assert (await purchase(client, p, card["id"], 1))["code"] == "DENIED_SPEND_CONTROL"
    assert await balances(client, ident, f"managed_accounts/{account_id}") == (1000, 1000)


# Declines (D22's table, in order)


@pytest.mark.parametrize(
    ("rule", "body", "reason"),
    [
        ({"blockedMerchantCategories": ["5399"]}, {}, "MERCHANT_CATEGORY_BLOCKED"),
        (
            {"allowedMerchantCategories": ["5411"]},
            {"merchantCategoryCode": "5812"},
            "MERCHANT_CATEGORY_NOT_IN_ALLOWED_LIST",
        ),
        ({"blockedMerchantIds": ["m-2"]}, {"merchantId": "m-2"}, "MERCHANT_ID_BLOCKED"),
        (
            {"allowedMerchantIds": ["m-1"]},
            {"merchantId": "m-2"},
            "MERCHANT_ID_NOT_IN_ALLOWED_LIST",
        ),
        ({"blockedMerchantCountries": ["MT"]}, {}, "MERCHANT_COUNTRY_BLOCKED"),
        (
            {"allowedMerchantCountries": ["IT"]},
            {"transactionCountry": "MLT"},
            "MERCHANT_COUNTRY_NOT_IN_ALLOWED_LIST",
        ),
        # A country both allowed and blocked is refused when written (decision 0073).
        ({"allowAtm": False}, {"atmWithdrawal": True}, "ATM_NOT_ALLOWED"),
        ({"allowECommerce": False}, {}, "ECOMMERCE_NOT_ALLOWED"),
        (
            {"minTransactionAmount": 20},
            {"transactionAmount": {"currency": "EUR", "amount": 19}},
            "MIN_TRANSACTION_AMOUNT_EXCEEDED",
        ),
        (
            {"maxTransactionAmount": 99},
            {"transactionAmount": {"currency": "EUR", "amount": 100}},
            "MAX_TRANSACTION_AMOUNT_EXCEEDED",
        ),
    ],
)
async def test_spend_rules_decline_with_their_reason(
    client,
    container,
    hooked,  # noqa: F811
    rule,
    body,
    reason,
):
    p, receiver = hooked
    ident = await verified(client, p)
    card = await prepaid(client, container, p, ident, 1000, **rule)
    answer = await simulate(client, p, f"{card['id']}/purchase", {**buy(50), **body})
    assert answer["code"] == "DENIED_SPEND_CONTROL"
    assert await balances(client, ident, f"managed_cards/{card['id']}") == (1000, 1000)
    await deliver(container)
    (event,) = [e.json for e in receiver.received if e.path == AUTHORISATIONS]
    assert event["approved"] is False and event["authorisationType"] == "DECLINED"
    assert event["declineReason"] == "AUTH_RULE_CHECKS_FAILED"
    assert event["authRuleFailedReason"] == reason
    assert event["transactionId"].isdigit() and len(event["authCode"]) == 6
    assert event["availableBalance"]["amount"] == "1000"
    assert not [e for e in receiver.received if e.path == SETTLEMENTS]


async def test_bounds_and_lists_let_what_they_allow_through(client, container, programme):
    p = await programme()
    ident = await verified(client, p)
    card = await prepaid(
        client,
        container,
        p,
        ident,
        1000,
        minTransactionAmount=20,
        maxTransactionAmount=99,
        allowedMerchantCategories=["5411"],
        allowedMerchantCountries=["IT"],
        allowECommerce=True,
    )
    for amount in (20, 21, 99):
        body = buy(amount, merchantCategoryCode="5411", transactionCountry="ITA")
        assert (await simulate(client, p, f"{card['id']}/purchase", body))["code"] == "APPROVED"


async def test_state_amount_currency_and_presence_declines(client, container, hooked):  # noqa: F811
    p, receiver = hooked
    ident = await verified(client, p)
    card = await prepaid(client, container, p, ident, 1000)
    cases = [
        (buy(0), "DENIED_AMOUNT_NOT_POSITIVE", "TRANSACTION_NOT_PERMITTED"),
        (buy(-5), "DENIED_AMOUNT_NOT_POSITIVE", "TRANSACTION_NOT_PERMITTED"),
        (buy(50, "GBP"), "DENIED_OTHER", "TRANSACTION_NOT_PERMITTED"),
        (buy(50, cardPresent=True), "DENIED_OTHER", "TRANSACTION_NOT_PERMITTED"),
        (buy(2**63 - 1), "DENIED_OTHER", "TRANSACTION_NOT_PERMITTED"),
        (buy(5000), "DENIED_NOT_ENOUGH_FUNDS", "INSUFFICIENT_BALANCE"),
    ]
    for body, code, _ in cases:
        assert (await simulate(client, p, f"{card['id']}/purchase", body))["code"] == code
    r = await client.post(f"{LATEST}/managed_cards/{card['id']}/block", headers=ident.headers)
    assert r.status_code == 204
    assert (await purchase(client, p, card["id"], 50))["code"] == "DENIED_CARD_INACTIVE"
    assert await balances(client, ident, f"managed_cards/{card['id']}") == (1000, 1000)
    await deliver(container)
    events = [e.json for e in receiver.received if e.path == AUTHORISATIONS]
    assert [e["declineReason"] for e in events] == [
        *(reason for _, _, reason in cases),
        "CARD_STATUS_NOT_ALLOWED",
    ]
    assert all(e["authRuleFailedReason"] == "NONE" for e in events)
    assert events[2]["transactionAmount"] == {"currency": "GBP", "amount": "-50"}
    assert events[4]["transactionAmount"]["amount"] == str(-(2**63 - 1))


async def test_an_unknown_or_another_programmes_card_is_not_found(client, container, programme):
    p, other = await programme(), await programme()
    ident = await verified(client, p)
    card = await prepaid(client, container, p, ident, 1000)
    assert (await purchase(client, other, card["id"], 50))["code"] == "DENIED_CARD_NOT_FOUND"
    assert (await purchase(client, p, "1234", 50))["code"] == "DENIED_CARD_NOT_FOUND"
    answer = await simulate(client, other, f"{card['id']}/authorise", buy(50))
    assert answer == {"code": "DENIED_CARD_NOT_FOUND"}
    assert await balances(client, ident, f"managed_cards/{card['id']}") == (1000, 1000)


async def test_malformed_bodies_are_400s(client, programme):
    p = await programme()
    for body in (
        {"transactionAmount": {"currency": "EUR", "amount": 5}},
        {"merchantName": "x", "transactionAmount": {"currency": "EURO", "amount": 5}},
        {"merchantName": "x", "transactionAmount": {"currency": "EUR", "amount": "5"}},
        {"merchantName": "", "transactionAmount": {"currency": "EUR", "amount": 5}},
    ):
        r = await client.post(f"{SIM}/cards/1/purchase", headers=sim(p), json=body)
        assert r.status_code == 400, (body, r.text)
    r = await client.post(f"{SIM}/cards/1/purchase", json=buy(5))
    assert r.status_code == 400


# By card details


async def test_a_purchase_by_card_details_checks_expiry_then_cvv(client, container, hooked):  # noqa: F811
    p, receiver = hooked
    ident = await verified(client, p)
    card = await prepaid(client, container, p, ident, 1000)
    number = await reveal(container, card["id"])
    keys: CardKeyring = container.card_keys()
    cvv = keys.cvv(number, card["expiryMmyy"], 1)
    wrong_cvv = f"{(int(cvv) + 1) % 1000:03d}"
    spaced = " ".join(number[i : i + 4] for i in range(0, 16, 4))

    async def by_details(number: str, cvv: str, expiry: str) -> str:
        body = {**buy(100), "cardNumber": number, "cvv": cvv, "expiryDate": expiry}
        return str((await simulate(client, p, "purchase", body))["code"])

    assert await by_details(number, wrong_cvv, "0101") == "DENIED_CARD_EXPIRY"
    assert await by_details(number, wrong_cvv, card["expiryMmyy"]) == "DENIED_INCORRECT_CVV"
    assert await by_details("5555550000000000", cvv, card["expiryMmyy"]) == "DENIED_CARD_NOT_FOUND"
    assert await by_details(spaced, cvv, card["expiryMmyy"]) == "APPROVED"
    assert await balances(client, ident, f"managed_cards/{card['id']}") == (890, 890)
    await deliver(container)
    events = [e.json for e in receiver.received if e.path == AUTHORISATIONS]
    assert [e["declineReason"] for e in events] == [
        "CARD_EXPIRY_CHECKS_FAILED",
        "CVV_CHECKS_FAILED",
        "NO_REASON",
    ]
    for received in receiver.received:  # no event carries the number
        assert number not in received.body.decode()


async def reveal(container: Any, card_id: str) -> str:
    """The card's number, as the sandbox's detokenize shows it to its owner (D20): decrypted
    here from what the database holds (that route is another slice's)."""
    async with container.db.transaction() as s:
        card = await s.get(ManagedCard, int(card_id))
        assert card is not None
        number: str = container.card_keys().decrypt(card.number_encrypted, card.id)
        return number


# Two phases


async def test_authorise_then_settle_less_releases_the_rest(
    client, container, programme, admin_headers
):
    p = await programme()
    ident = await verified(client, p)
    card = await prepaid(client, container, p, ident, 1000)
    path = f"managed_cards/{card['id']}"
    auth = await simulate(client, p, f"{card['id']}/authorise", buy(300))
    assert auth["code"] == "APPROVED" and set(auth) == {"code", "authorisationId"}
    assert await balances(client, ident, path) == (700, 1000)
    await ledger_ok(client, admin_headers, p)
    settle = f"{card['id']}/authorisations/{auth['authorisationId']}/settle"
    settled = await simulate(
        client, p, settle, {"transactionAmount": {"currency": "EUR", "amount": 200}}
    )
    assert settled["code"] == "COMPLETED" and settled["settlementId"].isdigit()
    assert await balances(client, ident, path) == (790, 790)
    # Settled once: a second settlement, a reversal or an expiry of it is refused.
    assert (await simulate(client, p, settle))["code"] == "DENIED_AUTHORISATION_NOT_PENDING"
    reverse = f"{card['id']}/authorisations/{auth['authorisationId']}/reverse"
    assert (await simulate(client, p, reverse))["code"] == "DENIED_AUTHORISATION_NOT_PENDING"
    assert (await simulate(client, p, f"{card['id']}/authorisations/1/settle"))["code"] == (
        "DENIED_AUTHORISATION_NOT_FOUND"
    )
    assert await balances(client, ident, path) == (790, 790)
    await ledger_ok(client, admin_headers, p)


async def test_settling_more_than_held_takes_only_what_the_balance_covers(
    client, container, programme, admin_headers
):
    p = await programme()
    ident = await verified(client, p)
    card = await prepaid(client, container, p, ident, 1000)
    path = f"managed_cards/{card['id']}"
    auth = (await simulate(client, p, f"{card['id']}/authorise", buy(300)))["authorisationId"]
    settle = f"{card['id']}/authorisations/{auth}/settle"
    too_much = {"transactionAmount": {"currency": "EUR", "amount": 1001}}
    assert (await simulate(client, p, settle, too_much))["code"] == "DENIED_NOT_ENOUGH_FUNDS"
    zero = {"transactionAmount": {"currency": "EUR", "amount": 0}}
    assert (await simulate(client, p, settle, zero))["code"] == "DENIED_AMOUNT_NOT_POSITIVE"
    assert await balances(client, ident, path) == (700, 1000)
    more = {"transactionAmount": {"currency": "EUR", "amount": 400}}
    assert (await simulate(client, p, settle, more))["code"] == "COMPLETED"
    assert await balances(client, ident, path) == (590, 590)
    await ledger_ok(client, admin_headers, p)


async def test_partial_and_full_reversals_give_the_hold_back(
    client,
    container,
    hooked,  # noqa: F811
    admin_headers,
):
    p, receiver = hooked
    ident = await verified(client, p)
    card, account_id = await debit(client, p, ident, 1000, [limit(600)])
    path = f"managed_accounts/{account_id}"
    auth = (await simulate(client, p, f"{card['id']}/authorise", buy(300)))["authorisationId"]
    assert await to_spend(client, ident, card["id"]) == [("ALWAYS", 300)]
    reverse = f"{card['id']}/authorisations/{auth}/reverse"
    part = await simulate(
        client, p, reverse, {"transactionAmount": {"currency": "EUR", "amount": 100}}
    )
    assert part["code"] == "COMPLETED" and part["reversalId"].isdigit()
    assert await balances(client, ident, path) == (800, 1000)
    assert await to_spend(client, ident, card["id"]) == [("ALWAYS", 400)]
    # More than is still held gives back all of it, and closes the authorisation.
    rest = await simulate(
        client, p, reverse, {"transactionAmount": {"currency": "EUR", "amount": 900}}
    )
    assert rest["code"] == "COMPLETED"
    assert await balances(client, ident, path) == (1000, 1000)
    assert await to_spend(client, ident, card["id"]) == [("ALWAYS", 600)]
    assert (await simulate(client, p, reverse))["code"] == "DENIED_AUTHORISATION_NOT_PENDING"
    await ledger_ok(client, admin_headers, p)
    await deliver(container)
    events = [e.json for e in receiver.received if e.path == AUTHORISATIONS]
    assert [e["authorisationType"] for e in events] == [
        "AUTHORISED",
        "ONLINE_REVERSE",
        "ONLINE_REVERSE",
    ]
    assert [e["transactionAmount"]["amount"] for e in events] == ["-300", "100", "200"]
    assert all(e["relatedAuthorisationId"] == auth for e in events[1:])
    debit_details = events[1]["details"]["debitModeDetails"]
    assert debit_details["parentManagedAccountId"] == account_id
    assert debit_details["availableToSpend"][0]["value"] == {"currency": "EUR", "amount": 400}
    assert events[1]["availableBalance"] == {"currency": "EUR", "amount": "0"}


async def test_a_hold_expires_after_seven_days_on_the_programme_clock(
    client,
    container,
    hooked,  # noqa: F811
    admin_headers,
):
    p, receiver = hooked
    ident = await verified(client, p)
    card = await prepaid(client, container, p, ident, 1000)
    path = f"managed_cards/{card['id']}"
    auth = (await simulate(client, p, f"{card['id']}/authorise", buy(300)))["authorisationId"]
    other = (await simulate(client, p, f"{card['id']}/authorise", buy(100)))["authorisationId"]
    await advance(client, ident, 6 * 86400)
    assert await balances(client, ident, path) == (600, 1000)
    # One is expired by hand; the other by the clock.
    expire = f"{card['id']}/authorisations/{other}/expire"
    assert (await simulate(client, p, expire))["code"] == "COMPLETED"
    assert await balances(client, ident, path) == (700, 1000)
    await advance(client, ident, 86400)
    assert await balances(client, ident, path) == (1000, 1000)
    settle = f"{card['id']}/authorisations/{auth}/settle"
    assert (await simulate(client, p, settle))["code"] == "DENIED_AUTHORISATION_NOT_PENDING"
    await ledger_ok(client, admin_headers, p)
    await deliver(container)
    events = [e.json for e in receiver.received if e.path == AUTHORISATIONS]
    assert [e["authorisationType"] for e in events] == [
        "AUTHORISED",
        "AUTHORISED",
        "EXPIRED",
        "EXPIRED",
    ]
    assert events[3]["relatedAuthorisationId"] == auth
    assert events[3]["transactionAmount"]["amount"] == "300"
    assert events[3]["availableBalance"]["amount"] == "1000"


# Refunds


async def test_a_refund_is_capped_by_its_settlement_and_pays_its_fee(
    client,
    container,
    hooked,  # noqa: F811
    admin_headers,
):
    p, receiver = hooked
    await set_card_fee(container, p, "refund", 3)
    ident = await verified(client, p)
    card = await prepaid(client, container, p, ident, 1000)
    path = f"managed_cards/{card['id']}"
    bought = await purchase(client, p, card["id"], 100)
    assert await balances(client, ident, path) == (890, 890)
    refund = f"{card['id']}/refund"
    first = await simulate(
        client, p, refund, {**buy(60), "relatedSettlementId": bought["settlementId"]}
    )
    assert first["code"] == "COMPLETED" and first["refundId"].isdigit()
    assert await balances(client, ident, path) == (947, 947)
    over = await simulate(
        client, p, refund, {**buy(41), "relatedSettlementId": bought["settlementId"]}
    )
    assert over["code"] == "DENIED_NOT_ENOUGH_FUNDS"
    rest = await simulate(
        client, p, refund, {**buy(40), "relatedSettlementId": bought["settlementId"]}
    )
    assert rest["code"] == "COMPLETED"
    assert await balances(client, ident, path) == (984, 984)
    unknown = await simulate(client, p, refund, {**buy(40), "relatedSettlementId": "12345"})
    assert unknown["code"] == "DENIED_AUTHORISATION_NOT_FOUND"
    huge = await simulate(client, p, refund, buy(2**63 - 1))
    assert huge["code"] == "DENIED_OTHER"
    # Without a related settlement: a merchant credit, no cap.
    credit = await simulate(client, p, refund, buy(5000))
    assert credit["code"] == "COMPLETED"
    assert await balances(client, ident, path) == (5981, 5981)
    await ledger_ok(client, admin_headers, p)
    await deliver(container)
    events = [e.json for e in receiver.received if e.path == SETTLEMENTS]
    assert [e["settlementType"] for e in events] == [
        "SALE_PURCHASE",
        "PURCHASE_REFUND",
        "PURCHASE_REFUND",
        "PURCHASE_REFUND",
    ]
    sale, refunded = events[0], events[1]
    assert sale["feeAmount"] == {"currency": "EUR", "amount": "10"}
    assert refunded["feeAmount"] == {"currency": "EUR", "amount": "3"}
    assert refunded["transactionAmount"]["amount"] == "60"
    assert refunded["relatedSettlementId"] == bought["settlementId"]
    assert refunded["authCode"] == sale["authCode"]
    assert events[3]["relatedSettlementId"] == "0"


async def test_a_merchant_refund_costs_both_fees(client, container, programme, admin_headers):
    p = await programme()
    await set_card_fee(container, p, "refund", 4)
    ident = await verified(client, p)
    card, account_id = await debit(client, p, ident, 1000)
    answer = await simulate(client, p, f"{card['id']}/merchant_refund", buy(250))
    assert answer["code"] == "APPROVED"
    assert await balances(client, ident, f"managed_accounts/{account_id}") == (986, 986)
    # Refused like a purchase (cards.md §5.5).
    empty, _ = await debit(client, p, ident, 0)
    answer = await simulate(client, p, f"{empty['id']}/merchant_refund", buy(250))
    assert answer["code"] == "DENIED_NOT_ENOUGH_FUNDS"
    await ledger_ok(client, admin_headers, p)


# Webhooks of a purchase (cards.md §7.1)


async def test_a_prepaid_purchase_sends_its_authorisation_and_settlement(
    client,
    container,
    hooked,  # noqa: F811
):
    p, receiver = hooked
    ident = await verified(client, p)
    card = await prepaid(client, container, p, ident, 500)
    bought = await purchase(client, p, card["id"], 10, merchantId="123456789")
    await deliver(container)
    (auth,) = [e for e in receiver.received if e.path == AUTHORISATIONS]
    (settled,) = [e for e in receiver.received if e.path == SETTLEMENTS]
    assert signed_by(p.api_key, auth) and signed_by(p.api_key, settled)
    a, s = auth.json, settled.json
    assert a["approved"] is True and a["authorisationType"] == "AUTHORISED"
    assert a["declineReason"] == "NO_REASON" and a["authRuleFailedReason"] == "NONE"
    assert a["availableBalance"] == {"currency": "EUR", "amount": "490"}
    assert a["details"] == {
        "prepaidModeDetails": {"availableBalance": {"currency": "EUR", "amount": "490"}}
    }
    assert a["id"] == {"type": "managed_cards", "id": card["id"]}
    assert a["owner"] == {"type": "corporates", "id": ident.id}
    assert a["merchantName"] == "Amazon IT" and a["merchantCategoryCode"] == "5399"
    assert a["merchantId"] == "123456789" and a["relatedAuthorisationId"] == "0"
    assert a["transactionAmount"] == a["sourceAmount"] == {"currency": "EUR", "amount": "-10"}
    assert a["transactionId"] == bought["authorisationId"]
    assert len(a["authCode"]) == 6 and a["authCode"].isdigit()
    assert a["cardPresent"] is False and a["cardholderPresent"] == "PRESENT"
    assert s["settlementType"] == "SALE_PURCHASE" and s["state"] == "COMPLETED"
    assert s["availableBalance"]["amount"] == str(490 - FEE)
    assert s["feeAmount"] == {"currency": "EUR", "amount": str(FEE)}
    assert s["relatedAuthorisationId"] == bought["authorisationId"]
    assert s["transactionId"] == bought["settlementId"]
    assert s["transactionAmount"]["amount"] == "-10" and s["authCode"] == a["authCode"]


async def test_a_debit_purchase_event_carries_available_to_spend(
    client,
    container,
    hooked,  # noqa: F811
):
    p, receiver = hooked
    ident = await verified(client, p)
    card, account_id = await debit(client, p, ident, 5000, [limit(1000)])
    await purchase(client, p, card["id"], 10)
    await deliver(container)
    (auth,) = [e.json for e in receiver.received if e.path == AUTHORISATIONS]
    (settled,) = [e.json for e in receiver.received if e.path == SETTLEMENTS]
    assert auth["availableBalance"]["amount"] == "0"
    spend = auth["details"]["debitModeDetails"]
    assert spend["parentManagedAccountId"] == account_id
    assert spend["availableToSpend"][0]["availableAmount"] == 990
    assert spend["availableToSpend"][0]["interval"] == "ALWAYS"
    after = settled["details"]["debitModeDetails"]["availableToSpend"][0]
    assert after["availableAmount"] == 1000 - 10 - FEE


async def test_a_journey_leaves_the_ledger_clean_and_the_card_removable(
    client, container, programme, admin_headers
):
    p = await programme()
    ident = await verified(client, p)
    card = await prepaid(client, container, p, ident, 1000)
    cid = card["id"]
    a1 = (await simulate(client, p, f"{cid}/authorise", buy(100)))["authorisationId"]
    a2 = (await simulate(client, p, f"{cid}/authorise", buy(200)))["authorisationId"]
    a3 = (await simulate(client, p, f"{cid}/authorise", buy(50)))["authorisationId"]
    await simulate(client, p, f"{cid}/authorisations/{a1}/settle")
    await simulate(
        client,
        p,
        f"{cid}/authorisations/{a2}/reverse",
        {"transactionAmount": {"currency": "EUR", "amount": 20}},
    )
    await ledger_ok(client, admin_headers, p)
    # An open hold keeps a prepaid card from being removed (D24).
    r = await client.post(f"{LATEST}/managed_cards/{cid}/remove", headers=ident.headers)
    assert r.status_code == 409 and r.json()["errorCode"] == "BALANCE_NOT_ZERO"
    await simulate(client, p, f"{cid}/authorisations/{a2}/settle")
    await simulate(client, p, f"{cid}/authorisations/{a3}/expire")
    await ledger_ok(client, admin_headers, p)
    assert (
        await balances(client, ident, f"managed_cards/{cid}") == (1000 - 100 - 180 - 2 * FEE,) * 2
    )
    async with container.db.transaction() as s:
        states = (
            await s.execute(
                select(CardAuthorisation.state).where(CardAuthorisation.card_id == int(cid))
            )
        ).scalars()
        assert sorted(states) == ["COMPLETED", "COMPLETED", "EXPIRED"]


async def test_an_atm_withdrawal_is_a_cash_withdrawal_with_its_own_fee(
    client,
    container,
    hooked,  # noqa: F811
):
    p, receiver = hooked
    await set_card_fee(container, p, "atmWithdrawal", 7)
    ident = await verified(client, p)
    card = await prepaid(client, container, p, ident, 1000)
    answer = await purchase(
        client, p, card["id"], 200, atmWithdrawal=True, merchantCategoryCode="5411"
    )
    assert answer["code"] == "APPROVED"
    assert await balances(client, ident, f"managed_cards/{card['id']}") == (793, 793)
    await deliver(container)
    (auth,) = [e.json for e in receiver.received if e.path == AUTHORISATIONS]
    (settled,) = [e.json for e in receiver.received if e.path == SETTLEMENTS]
    assert auth["merchantCategoryCode"] == "6011" and auth["transactionType"] == "CASH_WITHDRAWAL"
    assert settled["settlementType"] == "CASH_WITHDRAWAL"
    assert settled["feeAmount"]["amount"] == "7"


async def test_a_blocked_parent_account_does_not_stop_its_debit_card(client, programme):
    p = await programme()
    ident = await verified(client, p)
    card, account_id = await debit(client, p, ident, 1000)
    r = await client.post(f"{LATEST}/managed_accounts/{account_id}/block", headers=ident.headers)
    assert r.status_code == 204, r.text
    assert (await purchase(client, p, card["id"], 100))["code"] == "APPROVED"
    assert await balances(client, ident, f"managed_accounts/{account_id}") == (890, 890)


async def test_a_retried_purchase_with_one_idempotency_ref_buys_once(client, container, programme):
    p = await programme()
    ident = await verified(client, p)
    card = await prepaid(client, container, p, ident, 1000)
    headers = {**sim(p), "idempotency-ref": "buy-1"}
    url = f"{SIM}/cards/{card['id']}/purchase"
    first = await client.post(url, headers=headers, json=buy(100))
    again = await client.post(url, headers=headers, json=buy(100))
    assert first.status_code == again.status_code == 200
    assert first.json() == again.json() and first.json()["code"] == "APPROVED"
    assert await balances(client, ident, f"managed_cards/{card['id']}") == (890, 890)


@pytest.mark.parametrize(
    ("interval", "start"),
    [
        ("DAILY", "2026-11-27T00:00:00"),
        ("WEEKLY", "2026-11-23T00:00:00"),  # the Monday
        ("MONTHLY", "2026-11-01T00:00:00"),
        ("QUARTERLY", "2026-10-01T00:00:00"),
        ("YEARLY", "2026-01-01T00:00:00"),
    ],
)
def test_spend_windows_are_calendar_windows_in_utc(interval, start):
    now = datetime(2026, 11, 27, 22, 30, tzinfo=UTC)  # a Friday
    expected = datetime.fromisoformat(start).replace(tzinfo=UTC)
    assert window_start(interval, int(now.timestamp() * 1000)) == int(expected.timestamp() * 1000)
    assert window_start("ALWAYS", int(now.timestamp() * 1000)) == 0


async def test_the_background_step_expires_holds_that_fall_due(
    client, container, programme, admin_headers
):
    """Without a clock advance: the worker every server process runs finds the due hold."""
    p = await programme()
    ident = await verified(client, p)
    card = await prepaid(client, container, p, ident, 1000)
    await simulate(client, p, f"{card['id']}/authorise", buy(300))
    await due.run_due(container.db, container.clock, [money_steps.DUE])
    assert await balances(client, ident, f"managed_cards/{card['id']}") == (700, 1000)
    async with container.db.transaction() as s:  # the programme's clock, 7 days on
        programme_row = await s.get(Programme, int(p.id))
        assert programme_row is not None
        programme_row.clock_offset_ms += 7 * 86400 * 1000
    await due.run_due(container.db, container.clock, [money_steps.DUE])
    ident.token = (await login(client, p, ident.email)).json()["token"]
    assert await balances(client, ident, f"managed_cards/{card['id']}") == (1000, 1000)
    await ledger_ok(client, admin_headers, p)
    async with container.db.transaction() as s:
        states = (
            await s.execute(
                select(CardAuthorisation.state).where(CardAuthorisation.card_id == int(card["id"]))
            )
        ).scalars()
        assert list(states) == ["EXPIRED"]


async def test_a_refund_gives_a_debit_card_its_limit_back(client, programme, admin_headers):
    p = await programme()
    ident = await verified(client, p)
    card, account_id = await debit(client, p, ident, 1000, [limit(1000, "MONTHLY")])
    bought = await purchase(client, p, card["id"], 100)
    assert await to_spend(client, ident, card["id"]) == [("MONTHLY", 1000 - 100 - FEE)]
    body = {**buy(60), "relatedSettlementId": bought["settlementId"]}
    assert (await simulate(client, p, f"{card['id']}/refund", body))["code"] == "COMPLETED"
    assert await to_spend(client, ident, card["id"]) == [("MONTHLY", 1000 - 40 - FEE)]
    assert await balances(client, ident, f"managed_accounts/{account_id}") == (950, 950)
    await ledger_ok(client, admin_headers, p)


async def test_a_merchant_refund_by_card_details(client, container, programme):
    p = await programme()
    ident = await verified(client, p)
    card = await prepaid(client, container, p, ident, 1000)
    number = await reveal(container, card["id"])
    cvv = container.card_keys().cvv(number, card["expiryMmyy"], 1)
    details = {"cardNumber": number, "cvv": cvv, "expiryDate": card["expiryMmyy"]}
    answer = await simulate(client, p, "merchant_refund", {**buy(300), **details})
    assert answer["code"] == "APPROVED" and answer["refundId"].isdigit()
    assert await balances(client, ident, f"managed_cards/{card['id']}") == (990, 990)
    r = await client.post(f"{LATEST}/managed_cards/{card['id']}/block", headers=ident.headers)
    assert r.status_code == 204
    answer = await simulate(client, p, "merchant_refund", {**buy(300), **details})
    assert answer["code"] == "DENIED_CARD_INACTIVE"
    answer = await simulate(client, p, "purchase", {**buy(300), **details})
    assert answer["code"] == "DENIED_CARD_INACTIVE"
    assert await balances(client, ident, f"managed_cards/{card['id']}") == (990, 990)
