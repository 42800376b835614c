"""Spend-rule evaluation at authorisation (D22's table, cards.md §4.1), called as the simulator
calls it, in one rolled-back session: each of the card's own rules refuses with its reason and
moves nothing, the profile's rules refuse as the card's do, the checks come in D22's order, a
debit card's spend limits count what was held, settled and charged less what was refunded in the
limit's calendar window, and three wrong PINs block a card's PIN."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from multibank.cards import money
from multibank.cards.models import ManagedCard
from multibank.container import Container
from multibank.programmes import service as programmes
from multibank.programmes.schemas import ProfileUpdate
from tests import domain_factories as make
from tests.cards.support import DAY, FEE, MERCHANT_ID, attempt, events, last_event, programme
from tests.domain_factories import limit, rolled_back

ROOM = [limit(1_000_000)]  # a debit card's limit that refuses nothing here

# (the card's rules, the attempt's fields, the rule the refusal names); each case's attempt
# passes every other rule of its case.
REFUSED: list[tuple[dict[str, Any], dict[str, Any], str]] = [
    ({"blockedMerchantCategories": ["5399"]}, {}, "MERCHANT_CATEGORY_BLOCKED"),
    ({"allowedMerchantCategories": ["5411"]}, {}, "MERCHANT_CATEGORY_NOT_IN_ALLOWED_LIST"),
    ({"blockedMerchantIds": [MERCHANT_ID]}, {}, "MERCHANT_ID_BLOCKED"),
    ({"allowedMerchantIds": ["42"]}, {}, "MERCHANT_ID_NOT_IN_ALLOWED_LIST"),
    ({"blockedMerchantCountries": ["MT"]}, {}, "MERCHANT_COUNTRY_BLOCKED"),
    (
        {"allowedMerchantCountries": ["IT"]},
        {"country_alpha3": "FRA"},
        "MERCHANT_COUNTRY_NOT_IN_ALLOWED_LIST",
    ),
    ({"allowAtm": False}, {"atm": True}, "ATM_NOT_ALLOWED"),
    ({"allowECommerce": False}, {}, "ECOMMERCE_NOT_ALLOWED"),
    ({"minTransactionAmount": 500}, {}, "MIN_TRANSACTION_AMOUNT_EXCEEDED"),
    ({"maxTransactionAmount": 99}, {}, "MAX_TRANSACTION_AMOUNT_EXCEEDED"),
]
# The same rules, and attempts they let through.
PASSED: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({"blockedMerchantCategories": ["5411"]}, {}),
    ({"allowedMerchantCategories": ["5399"]}, {}),
    ({"allowedMerchantIds": [MERCHANT_ID]}, {}),
    ({"allowedMerchantCountries": ["IT"]}, {"country_alpha3": "ITA"}),
    ({"allowAtm": False}, {}),
    ({"allowECommerce": False}, {"atm": True}),
    ({"minTransactionAmount": 100, "maxTransactionAmount": 100}, {}),
]


async def test_each_rule_of_the_card_refuses_with_its_reason_and_moves_nothing(
    container: Container,
) -> None:
    async with rolled_back(container) as db:
        ctx = await programme(db, container)
        owner = await make.customer(ctx)
        parent = await make.account(ctx, owner, funds=1000)
        for rules, fields, rule in REFUSED:
            card = await make.card(ctx, container, owner, parent=parent, spendLimit=ROOM, **rules)
            outcome, auth = await money.authorise(ctx, card, attempt(100, **fields))
            assert (outcome.code, auth) == (money.DENIED_SPEND_CONTROL, None), rule
            event = await last_event(ctx, card)
            assert (event["authorisationType"], event["approved"]) == ("DECLINED", False)
            assert (event["declineReason"], event["authRuleFailedReason"]) == (
                "AUTH_RULE_CHECKS_FAILED",
                rule,
            )
            assert await money.spent(ctx, card) == dict.fromkeys(money.INTERVALS, 0), rule
        assert await make.balances(ctx, parent.id) == (1000, 1000)
        for rules, fields in PASSED:
            card = await make.card(ctx, container, owner, parent=parent, spendLimit=ROOM, **rules)
            outcome, _ = await money.authorise(ctx, card, attempt(100, **fields))
            assert outcome.code == money.APPROVED, rules
        assert await make.balances(ctx, parent.id) == (1000 - 100 * len(PASSED), 1000)


def test_the_checks_come_in_d22s_order() -> None:
    """Blocked before not allowed; categories, then merchant ids, then countries, then the
    ways of paying, then the amounts; on one level of rules (`spend_rule_decline`)."""
    every = {
        "blockedMerchantCategories": ["5399"],
        "allowedMerchantIds": ["42"],
        "blockedMerchantCountries": ["MT"],
        "allowECommerce": False,
        "maxTransactionAmount": 1,
    }
    tried = attempt(100)
    merchant = tried.merchant()
    order = []
    rules = dict(every)
    while (refused := money.spend_rule_decline(rules, tried, merchant)) is not None:
        order.append(refused.rule)
        rules.pop(next(iter(rules)))
    assert order == [
        "MERCHANT_CATEGORY_BLOCKED",
        "MERCHANT_ID_NOT_IN_ALLOWED_LIST",
        "MERCHANT_COUNTRY_BLOCKED",
        "ECOMMERCE_NOT_ALLOWED",
        "MAX_TRANSACTION_AMOUNT_EXCEEDED",
    ]
    both = {"blockedMerchantIds": [MERCHANT_ID], "allowedMerchantIds": ["42"]}
    assert money.spend_rule_decline(both, tried, merchant) == money.spend_control(
        "MERCHANT_ID_BLOCKED"
    )
    present = attempt(100, card_present=True)
    refused = money.spend_rule_decline({"allowContactless": False}, present, present.merchant())
    assert refused == money.spend_control("CONTACTLESS_NOT_ALLOWED")


async def test_the_card_and_its_profile_are_checked_before_the_rules(
    container: Container,
) -> None:
    """The card's standing comes first (D22 #3 to #6: expiry, state, amount, currency), then its
    own rules, then its profile's, which refuse as the card's own do."""
    async with rolled_back(container) as db:
        ctx = await programme(db, container)
        owner = await make.customer(ctx)
        card = await make.card(ctx, container, owner, funds=1000, blockedMerchantCountries=["MT"])
        kind = "corporatePrepaidManagedCard"
        update = ProfileUpdate.model_validate(
            {"spendRules": {"blockedMerchantCategories": ["5399"]}}
        )
        await programmes.update_profile(
            db, ctx.programme, (await make.profile(ctx, kind)).id, update
        )
        assert await money.profile_spend_rules(ctx, card) == {"blockedMerchantCategories": ["5399"]}
        standing = [
            (attempt(0), money.NOT_PERMITTED_AMOUNT),
            (attempt(100, "GBP"), money.NOT_PERMITTED),
            (attempt(money.MAX_AMOUNT + 1), money.NOT_PERMITTED),
            (attempt(100), money.spend_control("MERCHANT_COUNTRY_BLOCKED")),
            (attempt(100, country_alpha3="ITA"), money.spend_control("MERCHANT_CATEGORY_BLOCKED")),
        ]
        for tried, refused in standing:
            outcome, _ = await money.authorise(ctx, card, tried)
            assert outcome.code == refused.code, tried
            event = await last_event(ctx, card)
            assert (event["declineReason"], event["authRuleFailedReason"]) == (
                refused.reason,
                refused.rule,
            )
        assert (
            money.standing_decline(card, attempt(0, "GBP"), ctx.now) == money.NOT_PERMITTED_AMOUNT
        )
        card.state = "BLOCKED"
        assert money.standing_decline(card, attempt(0), ctx.now) == money.INACTIVE
        assert money.standing_decline(card, attempt(0), ctx.now + 40 * 31 * DAY) == (
            money.EXPIRY_FAILED
        )
        assert await make.balances(ctx, card.id) == (1000, 1000)
        assert len(await events(ctx, card)) == len(standing)


async def test_spend_limits_count_the_spend_of_their_window(container: Container) -> None:
    """Held, settled and fees count against every limit whose window the authorisation was
    made in, refunds count back; a limit met exactly still approves; the next day a DAILY
    limit starts again, the ALWAYS one does not (D22 #12)."""
    async with rolled_back(container) as db:
        ctx = await programme(db, container)
        owner = await make.customer(ctx)
        parent = await make.account(ctx, owner, funds=10_000)
        limits = [limit(1000, "DAILY"), limit(1500)]
        card = await make.card(ctx, container, owner, parent=parent, spendLimit=limits)
        bought = await money.purchase(ctx, card, attempt(600))
        _, held = await money.authorise(ctx, card, attempt(300))
        assert held is not None
        assert (await money.spent(ctx, card))["DAILY"] == 600 + FEE + 300
        over, _ = await money.authorise(ctx, card, attempt(1000 - 910 + 1))
        assert over.code == money.DENIED_SPEND_CONTROL
        assert (await last_event(ctx, card))["authRuleFailedReason"] == "SPEND_LIMIT_EXCEEDED"
        exact, _ = await money.authorise(ctx, card, attempt(1000 - 910))
        assert exact.code == money.APPROVED
        assert [s["value"]["amount"] for s in await money.available_to_spend(ctx, card)] == [
            0,
            500,
        ]
        settled = await money.locked_authorisation(ctx, card, bought.authorisation_id or 0)
        await money.refund(ctx, card, attempt(200), settled, bought.settlement_id)
        assert (await money.spent(ctx, card))["DAILY"] == 1000 - 200

        tomorrow = make.later(ctx, DAY)
        assert (await money.spent(tomorrow, card)) == {
            **dict.fromkeys(money.INTERVALS, 800),
            "DAILY": 0,
        }
        again, _ = await money.authorise(tomorrow, card, attempt(700 + 1))
        assert again.code == money.DENIED_SPEND_CONTROL  # the ALWAYS limit: 1500 - 800 left
        again, _ = await money.authorise(tomorrow, card, attempt(700))
        assert again.code == money.APPROVED


async def test_a_debit_card_without_a_limit_cannot_spend(container: Container) -> None:
    async with rolled_back(container) as db:
        ctx = await programme(db, container)
        owner = await make.customer(ctx)
        parent = await make.account(ctx, owner, funds=1000)
        card: ManagedCard = await make.card(ctx, container, owner, parent=parent)
        assert money.limits_of(card) == [limit(0)]  # the implicit ALWAYS 0 (D22)
        outcome, _ = await money.authorise(ctx, card, attempt(1))
        assert outcome.code == money.DENIED_SPEND_CONTROL


def test_the_windows_are_calendar_periods_in_utc() -> None:
    # Thursday 14 August 2025, 15:30 UTC
    now = int(datetime(2025, 8, 14, 15, 30, tzinfo=UTC).timestamp() * 1000)
    starts = {
        interval: datetime.fromtimestamp(money.window_start(interval, now) / 1000, tz=UTC)
        for interval in money.INTERVALS
    }
    assert {k: v.date().isoformat() for k, v in starts.items()} == {
        "DAILY": "2025-08-14",
        "WEEKLY": "2025-08-11",
        "MONTHLY": "2025-08-01",
        "QUARTERLY": "2025-07-01",
        "YEARLY": "2025-01-01",
        "ALWAYS": "1970-01-01",
    }
    assert all(start.time().isoformat() == "00:00:00" for start in starts.values())


async def test_three_wrong_pins_in_a_row_block_the_pin(container: Container) -> None:
    """D25: a wrong PIN counts, the third in a row blocks the PIN, a right one sets the count
    back; checked only for a card-present attempt that gave one."""
    async with rolled_back(container) as db:
        ctx = await programme(db, container)
        card = await make.card(ctx, container, await make.customer(ctx), funds=1000)
        wrong, right = (
            attempt(10, card_present=True, pin_matches=False),
            attempt(10, card_present=True, pin_matches=True),
        )
        assert await money.check_pin(ctx, card, attempt(10, pin_matches=False)) is None
        assert await money.check_pin(ctx, card, wrong) == money.PIN_FAILED
        assert await money.check_pin(ctx, card, right) is None
        assert card.pin_failures == 0
        found = [await money.check_pin(ctx, card, wrong) for _ in range(3)]
        assert found == [money.PIN_FAILED, money.PIN_FAILED, money.PIN_BLOCKED]
        assert card.pin_blocked
