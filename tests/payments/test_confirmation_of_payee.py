"""Confirmation of Payee (D41, decision 0084) called as the 3.63 line's routes call it, in one
transaction that is rolled back: what a live programme does (no provider: no check), the
sandbox's answers, and the hold kept and given back through confirm, cancel and expiry."""

from __future__ import annotations

from multibank.container import Container
from multibank.payments import cop, owt, steps
from multibank.payments.schemas import OwtCreate
from multibank.programmes.context import Ctx
from multibank.reconciliation import verify
from tests import domain_factories as make
from tests.domain_factories import rolled_back


async def _gbp(ctx: Ctx, source: int, account_number: str = "12345678") -> OwtCreate:
    return OwtCreate.model_validate(
        {
            "profileId": str((await make.profile(ctx, "outgoingWireTransfers")).id),
            "sourceInstrument": {"id": str(source), "type": "managed_accounts"},
            "transferAmount": {"currency": "GBP", "amount": 5000},
            "destinationBeneficiary": {
                "name": "Ada Lovelace",
                "bankAccountDetails": {"accountNumber": account_number, "sortCode": "400400"},
            },
        }
    )


async def test_a_live_programme_has_no_provider_and_checks_nothing(container: Container) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container, mode="live")
        who = await make.customer(ctx)
        source = await make.account(ctx, who, "GBP", funds=10_000, iban=True)
        payment = await owt.create(ctx, who.owner, await _gbp(ctx, source.id), confirm_payee=True)
        assert (payment.state, payment.validation_outcomes) == ("PENDING_CHALLENGE", None)


async def test_the_hold_is_kept_while_it_waits_and_given_back_when_it_expires(
    container: Container,
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        who = await make.customer(ctx)
        source = await make.account(ctx, who, "GBP", funds=10_000, iban=True)
        payment = await owt.create(ctx, who.owner, await _gbp(ctx, source.id), confirm_payee=True)
        assert (payment.state, payment.reserved) == ("PENDING_CONFIRMATION", 5100)
        assert payment.due_at == ctx.now + owt.CONFIRMATION_TTL_MS
        assert await make.balances(ctx, source.id) == (4900, 10_000)
        await steps.step(make.later(ctx, owt.CONFIRMATION_TTL_MS), payment)
        assert (payment.state, payment.failure) == ("FAILED", owt.CONFIRMATION_EXPIRED)
        assert (payment.reserved, payment.due_at) == (0, None)
        assert await make.balances(ctx, source.id) == (10_000, 10_000)
        assert await verify(db, ctx.programme.id) == []


async def test_a_cancel_of_a_confirmed_one_gives_the_hold_back(container: Container) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        who = await make.customer(ctx)
        source = await make.account(ctx, who, "GBP", funds=10_000, iban=True)
        payment = await owt.create(ctx, who.owner, await _gbp(ctx, source.id), confirm_payee=True)
        await owt.confirm(ctx, who.owner, payment)
        assert (payment.state, payment.due_at) == ("PENDING_CHALLENGE", ctx.now + 300_000)
        await owt.cancel(ctx, payment, "changed my mind")
        assert (payment.state, payment.cancellation_reason) == ("CANCELLED", "changed my mind")
        assert (payment.reserved, payment.due_at) == (0, None)
        assert await make.balances(ctx, source.id) == (10_000, 10_000)
        assert await verify(db, ctx.programme.id) == []


def test_the_sandbox_answers() -> None:
    def answer(number: str) -> dict[str, str]:
        beneficiary = {"name": "Ada", "bankAccountDetails": {"accountNumber": number}}
        [outcome] = cop.sandbox_outcomes(beneficiary)
        assert outcome["category"] == cop.UK_CONFIRMATION_OF_PAYEE
        result: dict[str, str] = outcome["categoryResult"]
        return result

    assert answer("00009991") == {
        "match": "CLOSE_MATCH",
        "reasonCode": "MBAM",
        "accountName": "Ada Ltd",
    }
    assert answer("00009992") == {"match": "NO_MATCH", "reasonCode": "ANNM"}
    assert answer("00009993") == {"match": "NO_MATCH", "reasonCode": "AC01"}
    assert answer("99919999") == {"match": "EXACT_MATCH", "accountName": "Ada"}
