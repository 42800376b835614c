"""The lifecycle of card money, called as the routes and the clock call it, in one rolled-back
session: an authorisation's hold ends once (settled, reversed or expired on the programme clock
after 7 days, D24), and the card's own life decides what it may pay (D22 #3, #4): a blocked card
declines until unblocked, a removed one for good, a card past its expiry declines for it whether
or not the clock's step has destroyed it yet, and a renewed one pays again."""

from __future__ import annotations

import pytest

from multibank.cards import lifecycle, money
from multibank.cards import service as cards
from multibank.cards.authorisations import COMPLETED, EXPIRED, PENDING_SETTLEMENT
from multibank.cards.schemas import ManagedCardUpdate
from multibank.container import Container
from multibank.kernel.errors import Conflict
from tests import domain_factories as make
from tests.cards.support import (
    attempt,
    authorisation,
    book,
    events,
    last_event,
    programme,
)
from tests.domain_factories import rolled_back


async def test_an_open_hold_expires_once_after_seven_days(container: Container) -> None:
    async with rolled_back(container) as db:
        ctx = await programme(db, container)
        card = await make.card(ctx, container, await make.customer(ctx), funds=1000)
        _, auth = await money.authorise(ctx, card, attempt(300))
        assert auth is not None
        almost = make.later(ctx, money.AUTHORISATION_TTL_MS - 1)
        assert not await money.expire_due(almost, auth.id)
        assert (await authorisation(ctx, auth.id)).state == PENDING_SETTLEMENT
        due = make.later(ctx, money.AUTHORISATION_TTL_MS)
        assert await money.expire_due(due, auth.id)
        expired = await authorisation(ctx, auth.id)
        assert (expired.state, expired.open_amount) == (EXPIRED, 0)
        assert await make.balances(ctx, card.id) == (1000, 1000)
        assert await book(ctx, card) == (0, 0)
        event = await last_event(ctx, card)
        assert (event["authorisationType"], event["transactionAmount"]["amount"]) == (
            "EXPIRED",
            "300",
        )
        assert event["relatedAuthorisationIds"] == [str(auth.id)]
        assert not await money.expire_due(due, auth.id)  # once
        assert len(await events(ctx, card)) == 2


async def test_a_closed_authorisation_takes_no_second_step(container: Container) -> None:
    async with rolled_back(container) as db:
        ctx = await programme(db, container)
        card = await make.card(ctx, container, await make.customer(ctx), funds=1000)
        _, auth = await money.authorise(ctx, card, attempt(300))
        assert (await money.settle(ctx, card, auth)).code == money.CODE_COMPLETED
        balances = await make.balances(ctx, card.id)
        again = [
            await money.settle(ctx, card, auth),
            await money.reverse(ctx, card, auth),
            await money.expire(ctx, card, auth),
        ]
        assert {outcome.code for outcome in again} == {money.DENIED_AUTHORISATION_NOT_PENDING}
        assert not await money.expire_due(make.later(ctx, money.AUTHORISATION_TTL_MS), auth.id)
        assert (await authorisation(ctx, auth.id if auth else None)).state == COMPLETED
        assert await make.balances(ctx, card.id) == balances
        missing = [
            await money.settle(ctx, card, None),
            await money.reverse(ctx, card, None),
            await money.expire(ctx, card, None),
        ]
        assert {outcome.code for outcome in missing} == {money.DENIED_AUTHORISATION_NOT_FOUND}
        assert await money.locked_authorisation(ctx, card, 1) is None
        other = await make.card(ctx, container, await make.customer(ctx), funds=10)
        assert auth is not None
        assert await money.locked_authorisation(ctx, other, auth.id) is None


async def test_a_blocked_card_declines_until_it_is_unblocked(container: Container) -> None:
    async with rolled_back(container) as db:
        ctx = await programme(db, container)
        owner = await make.customer(ctx)
        card = await make.card(ctx, container, owner, funds=1000)
        await cards.block(ctx, owner.account_owner, str(card.id))
        outcome, _ = await money.authorise(ctx, card, attempt(100))
        assert outcome.code == money.DENIED_CARD_INACTIVE
        assert (await last_event(ctx, card))["declineReason"] == "CARD_STATUS_NOT_ALLOWED"
        assert (await money.purchase(ctx, card, attempt(100))).code == money.DENIED_CARD_INACTIVE
        await cards.unblock(ctx, owner.account_owner, str(card.id))
        assert (await money.purchase(ctx, card, attempt(100))).code == money.APPROVED
        assert await make.balances(ctx, card.id) == (1000 - 100 - 10,) * 2


async def test_a_removed_card_declines_and_one_holding_money_stays(container: Container) -> None:
    async with rolled_back(container) as db:
        ctx = await programme(db, container)
        owner = await make.customer(ctx)
        card = await make.card(ctx, container, owner, funds=100)
        _, auth = await money.authorise(ctx, card, attempt(100))
        # All of it is held, none available: the held money is still the card's.
        with pytest.raises(Conflict) as refused:
            await cards.remove(ctx, owner.account_owner, str(card.id))
        assert refused.value.error_code == "BALANCE_NOT_ZERO"
        parent = await make.account(ctx, owner, funds=1000)
        debit = await make.card(ctx, container, owner, parent=parent, spendLimit=[make.limit(500)])
        await cards.remove(ctx, owner.account_owner, str(debit.id))
        assert (debit.state, debit.destroyed_reason, debit.spend_rules) == (
            "DESTROYED",
            "USER",
            None,
        )
        outcome, _ = await money.authorise(ctx, debit, attempt(100))
        assert outcome.code == money.DENIED_CARD_INACTIVE
        assert await make.balances(ctx, parent.id) == (1000, 1000)
        assert auth is not None and auth.state == PENDING_SETTLEMENT


async def test_a_card_past_its_expiry_declines_for_it_however_the_clock_went(
    container: Container,
) -> None:
    async with rolled_back(container) as db:
        ctx = await programme(db, container)
        card = await make.card(ctx, container, await make.customer(ctx), funds=1000)
        past = make.later(ctx, card.expires_at - ctx.now)
        before = make.later(ctx, card.expires_at - ctx.now - 1)
        assert money.standing_decline(card, attempt(100), before.now) is None
        # The clock's step has not been taken yet: the card is ACTIVE, and past its expiry.
        assert card.state == "ACTIVE"
        outcome, _ = await money.authorise(past, card, attempt(100))
        assert outcome.code == money.DENIED_CARD_EXPIRY
        assert (await last_event(past, card))["declineReason"] == "CARD_EXPIRY_CHECKS_FAILED"
        # Taken: a NO_RENEW card is destroyed by its expiry, and still declines for it.
        assert await lifecycle.step(past, card)
        assert (card.state, card.destroyed_reason) == ("DESTROYED", "EXPIRED")
        assert (await money.purchase(past, card, attempt(100))).code == money.DENIED_CARD_EXPIRY
        assert await make.balances(ctx, card.id) == (1000, 1000)  # its money stays on it


async def test_a_renewed_card_pays_past_its_old_expiry(container: Container) -> None:
    async with rolled_back(container) as db:
        ctx = await programme(db, container)
        owner = await make.customer(ctx)
        card = await make.card(ctx, container, owner, funds=1000)
        update = ManagedCardUpdate.model_validate({"renewalType": "AUTO_RENEW"})
        await cards.update(ctx, owner.account_owner, str(card.id), update)
        old_expiry = card.expiry_mmyy
        past = make.later(ctx, card.expires_at - ctx.now)
        assert await lifecycle.step(past, card)
        assert (card.state, card.version) == ("ACTIVE", 2)
        assert card.expiry_mmyy != old_expiry
        assert (await money.purchase(past, card, attempt(100))).code == money.APPROVED
