"""Payments (D12 to D14) called as the routes call them, in one transaction that is rolled back:
transfers between an identity's own accounts, sends to another identity (at once, exempted, or
held for SCA), outgoing wire transfers through their steps, and the refusals a client sees as
errorCodes. Balances are asserted as (available, actual)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from multibank.container import Container
from multibank.identities import service as identities
from multibank.identities.models import CONSUMER
from multibank.kernel.codes import SANDBOX_CODE
from multibank.kernel.errors import Conflict, NotFound
from multibank.ledger import service as ledger
from multibank.ledger.models import RESERVED, LedgerTransaction
from multibank.payments import owt, sca, steps
from multibank.payments import service as payments
from multibank.payments.models import Payment
from multibank.payments.schemas import OwtCreate, TransferCreate
from multibank.programmes.context import Ctx
from multibank.reconciliation import verify
from tests import domain_factories as make
from tests.domain_factories import rolled_back

MA = "managed_accounts"
GOOD_IBAN = "DE89370400440532013000"
CANNED = "WV38WEAV50201555"
MINUTE = 60_000


async def _body(ctx: Ctx, kind: str, source: int, destination: int, amount: int, cur: str = "EUR"):
    return TransferCreate.model_validate(
        {
            "profileId": str((await make.profile(ctx, kind)).id),
            "source": {"id": str(source), "type": MA},
            "destination": {"id": str(destination), "type": MA},
            "destinationAmount": {"currency": cur, "amount": amount},
        }
    )


async def _owt_body(
    ctx: Ctx, source: int, amount: int, iban: str = GOOD_IBAN, currency: str = "EUR"
) -> OwtCreate:
    return OwtCreate.model_validate(
        {
            "profileId": str((await make.profile(ctx, "outgoingWireTransfers")).id),
            "sourceInstrument": {"id": str(source), "type": MA},
            "transferAmount": {"currency": currency, "amount": amount},
            "description": "Invoice 42",
            "destinationBeneficiary": {
                "name": "Ada Lovelace",
                "bankAccountDetails": {"iban": iban, "bankIdentifierCode": "COBADEFFXXX"},
            },
        }
    )


async def _stored(ctx: Ctx, payment_id: int) -> Payment:
    found = await ctx.db.scalar(
        select(Payment).where(Payment.id == payment_id).execution_options(populate_existing=True)
    )
    assert found is not None
    return found


async def _ledger_state(ctx: Ctx, payment_id: int) -> str | None:
    return await ctx.db.scalar(
        select(LedgerTransaction.state).where(LedgerTransaction.id == payment_id)
    )


# Transfers


async def test_a_transfer_between_own_accounts_moves_amount_and_fee(container: Container) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        await make.set_payment_fee(ctx, "transfers", "EUR", 10)
        alice = await make.customer(ctx)
        source = await make.account(ctx, alice, funds=1000)
        destination = await make.account(ctx, alice, name="Savings")
        body = await _body(ctx, "transfers", source.id, destination.id, 300)
        payment = await payments.create_transfer(ctx, alice.owner, body)
        assert (payment.kind, payment.state, payment.amount, payment.fee) == (
            "TRANSFER",
            "COMPLETED",
            300,
            10,
        )
        assert payment.transaction_id == payment.id
        assert await make.balances(ctx, source.id) == (690, 690)
        assert await make.balances(ctx, destination.id) == (300, 300)
        assert await make.revenue(ctx) == (10, 10)
        stored = await _stored(ctx, payment.id)
        assert (stored.state, stored.source_id, stored.destination_id, stored.reserved) == (
            "COMPLETED",
            source.id,
            destination.id,
            0,
        )
        assert await _ledger_state(ctx, payment.id) == "COMPLETED"
        # The owner reads it back; another identity cannot.
        assert (await payments.load(ctx, alice.owner, "TRANSFER", str(payment.id))).id == payment.id
        bob = await make.customer(ctx)
        with pytest.raises(NotFound):
            await payments.load(ctx, bob.owner, "TRANSFER", str(payment.id))
        assert await verify(db, ctx.programme.id) == []


@pytest.mark.parametrize(
    ("case", "error_code"),
    [
        ("more than the balance", "FUNDS_INSUFFICIENT"),
        ("the fee on top of the balance", "FUNDS_INSUFFICIENT"),
        ("another currency", "CURRENCY_MISMATCH"),
        ("the same account", "SOURCE_AND_DESTINATION_MUST_BE_DIFFERENT"),
        ("another identity's destination", "DESTINATION_NOT_FOUND"),
        ("another identity's source", "SOURCE_NOT_FOUND"),
        ("an identity no longer verified", "INSTRUMENT_DENIED_TRANSACTION"),
        ("a zero amount", "AMOUNT_INVALID"),
    ],
)
async def test_a_refused_transfer_moves_nothing(
    container: Container, case: str, error_code: str
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        await make.set_payment_fee(ctx, "transfers", "EUR", 10)
        alice, bob = await make.customer(ctx), await make.customer(ctx)
        # The source first: its id is the lowest, so the ledger refuses its leg before any other.
        source = await make.account(ctx, alice, funds=1000)
        destination = await make.account(ctx, alice)
        theirs = await make.account(ctx, bob, funds=1000)
        gbp = await make.account(ctx, alice, "GBP")
        amount, src, dst, currency = 500, source.id, destination.id, "EUR"
        if case == "more than the balance":
            amount = 1001
        elif case == "the fee on top of the balance":
            amount = 991
        elif case == "another currency":
            dst = gbp.id
        elif case == "the same account":
            dst = src
        elif case == "another identity's destination":
            dst = theirs.id
        elif case == "another identity's source":
            src = theirs.id
        elif case == "an identity no longer verified":
            await identities.simulate_reject(ctx, alice.identity.id, alice.identity.type, False)
        elif case == "a zero amount":
            amount = 0
        body = await _body(ctx, "transfers", src, dst, amount, currency)
        with pytest.raises(Conflict) as refused:
            await payments.create_transfer(ctx, alice.owner, body)
        assert refused.value.error_code == error_code
        assert await make.balances(ctx, source.id) == (1000, 1000)
        assert await make.balances(ctx, destination.id) == (0, 0)
        assert await make.balances(ctx, theirs.id) == (1000, 1000)
        written = await db.scalars(
            select(Payment.id).where(Payment.programme_id == ctx.programme.id)
        )
        assert written.all() == []


async def test_a_transfer_with_another_kind_s_profile_is_not_found(container: Container) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        alice = await make.customer(ctx)
        a, b = await make.account(ctx, alice, funds=100), await make.account(ctx, alice)
        with pytest.raises(NotFound):
            await payments.create_transfer(
                ctx, alice.owner, await _body(ctx, "sends", a.id, b.id, 1)
            )


async def test_a_refused_transfer_leaves_committed_balances_as_they_were(
    container: Container,
) -> None:
    """The destination is older than the source, so its credit comes first in the ledger's
    order; the refusal's rollback still leaves every committed balance as it was."""
    async with container.db.transaction() as db:
        ctx = await make.new_programme(db, container)
        alice = await make.customer(ctx)
        destination = await make.account(ctx, alice, funds=5)
        source = await make.account(ctx, alice, funds=100)
    async with rolled_back(container) as db:
        ctx = Ctx(db, ctx.programme, ctx.now)
        with pytest.raises(Conflict) as refused:
            body = await _body(ctx, "transfers", source.id, destination.id, 101)
            await payments.create_transfer(ctx, alice.owner, body)
        assert refused.value.error_code == "FUNDS_INSUFFICIENT"
    async with container.db.sessionmaker() as db:
        ctx = Ctx(db, ctx.programme, ctx.now)
        assert await make.balances(ctx, source.id) == (100, 100)
        assert await make.balances(ctx, destination.id) == (5, 5)
        assert await verify(db, ctx.programme.id) == []


# Sends


async def test_a_send_without_sca_pays_the_other_identity_at_once(container: Container) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container, sendsScaRequired=False)
        await make.set_payment_fee(ctx, "sends", "EUR", 25)
        alice, bob = await make.customer(ctx), await make.customer(ctx, CONSUMER)
        source = await make.account(ctx, alice, funds=10_000)
        destination = await make.account(ctx, bob)
        body = await _body(ctx, "sends", source.id, destination.id, 5000)
        payment = await payments.create_send(ctx, alice.owner, body)
        assert (payment.state, payment.exemption) == ("COMPLETED", None)
        assert payment.destination_identity_id == bob.identity.id
        assert await make.balances(ctx, source.id) == (4975, 4975)
        assert await make.balances(ctx, destination.id) == (5000, 5000)
        assert await make.revenue(ctx) == (25, 25)
        assert await verify(db, ctx.programme.id) == []


async def test_a_low_value_send_is_exempted_from_sca(container: Container) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        alice, bob = await make.customer(ctx), await make.customer(ctx)
        source = await make.account(ctx, alice, funds=10_000)
        destination = await make.account(ctx, bob)
        body = await _body(ctx, "sends", source.id, destination.id, 3000)
        payment = await payments.create_send(ctx, alice.owner, body)
        assert (payment.state, payment.exemption) == ("COMPLETED", "LOW_VALUE")
        assert await make.balances(ctx, destination.id) == (3000, 3000)
        # Above the exemption's amount, SCA applies: the money is held.
        body = await _body(ctx, "sends", source.id, destination.id, 3001)
        held = await payments.create_send(ctx, alice.owner, body)
        assert (held.state, held.exemption, held.reserved) == ("PENDING", None, 3001)
        assert await make.balances(ctx, source.id) == (3999, 7000)


async def _held_send(ctx: Ctx, amount: int = 5000) -> tuple[make.Customer, int, int, Payment]:
    alice, bob = await make.customer(ctx, sms=True), await make.customer(ctx)
    source = await make.account(ctx, alice, funds=10_000)
    destination = await make.account(ctx, bob)
    body = await _body(ctx, "sends", source.id, destination.id, amount)
    payment = await payments.create_send(ctx, alice.owner, body)
    assert payment.state == "PENDING"
    assert await make.balances(ctx, source.id) == (10_000 - amount - payment.fee, 10_000)
    assert await make.balances(ctx, destination.id) == (0, 0)
    assert await _ledger_state(ctx, payment.id) == "PENDING"
    return alice, source.id, destination.id, payment


async def test_a_held_send_completes_once_its_sms_challenge_is_verified(
    container: Container,
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        await make.set_payment_fee(ctx, "sends", "EUR", 20)
        alice, source, destination, payment = await _held_send(ctx)
        assert payment.fee == 20
        assert await make.balances(ctx, source) == (4980, 10_000)
        await sca.start_otp(ctx, alice.auth, payment)
        assert (payment.state, payment.challenge_channel) == ("PENDING_CHALLENGE", "SMS")
        # A second challenge cannot start while this one runs.
        with pytest.raises(Conflict) as again:
            await sca.start_otp(ctx, alice.auth, payment)
        assert again.value.error_code == "STATE_INVALID"
        await sca.verify_otp(make.later(ctx, MINUTE), alice.auth, payment, SANDBOX_CODE)
        assert (payment.state, payment.reserved) == ("COMPLETED", 0)
        assert payment.sca_at is not None
        assert await make.balances(ctx, source) == (4980, 4980)
        assert await make.balances(ctx, destination) == (5000, 5000)
        assert await make.revenue(ctx) == (20, 20)
        assert await _ledger_state(ctx, payment.id) == "COMPLETED"
        assert (await _stored(ctx, payment.id)).state == "COMPLETED"
        assert await verify(db, ctx.programme.id) == []


async def test_wrong_codes_count_down_then_end_the_send_and_release_the_hold(
    container: Container,
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container, scaChallengeLimit=3)
        alice, source, destination, payment = await _held_send(ctx)
        await sca.start_otp(ctx, alice.auth, payment)
        said = []
        for _ in range(3):
            with pytest.raises(Conflict) as refused:
                await sca.verify_otp(ctx, alice.auth, payment, "000000")
            # The wrong try is kept although the answer is a refusal.
            assert refused.value.keep_changes
            said.append(refused.value.error_code)
        assert said == [
            "VERIFICATION_CODE_INVALID",
            "ONE_CHALLENGE_LIMIT_REMAINING",
            "CHALLENGE_LIMIT_EXCEEDED",
        ]
        assert (payment.state, payment.failure, payment.reserved) == (
            "REJECTED",
            "CHALLENGE_LIMIT_EXCEEDED",
            0,
        )
        assert await make.balances(ctx, source) == (10_000, 10_000)
        assert await make.balances(ctx, destination) == (0, 0)
        assert await _ledger_state(ctx, payment.id) == "REJECTED"
        # The right code comes too late now.
        with pytest.raises(Conflict) as late:
            await sca.verify_otp(ctx, alice.auth, payment, SANDBOX_CODE)
        assert late.value.error_code == "STATE_INVALID"
        assert await verify(db, ctx.programme.id) == []


async def test_a_send_not_verified_within_five_minutes_expires(container: Container) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        alice, source, _, payment = await _held_send(ctx)
        await sca.start_otp(ctx, alice.auth, payment)
        with pytest.raises(Conflict) as expired:
            await sca.verify_otp(make.later(ctx, 5 * MINUTE), alice.auth, payment, SANDBOX_CODE)
        assert expired.value.error_code == "VERIFICATION_CODE_EXPIRED"
        assert (payment.state, payment.failure) == ("REJECTED", "CHALLENGE_EXPIRED")
        assert await make.balances(ctx, source) == (10_000, 10_000)
        assert await verify(db, ctx.programme.id) == []


async def test_a_send_whose_challenge_was_never_started_expires_when_due(
    container: Container,
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        _, source, _, payment = await _held_send(ctx)
        assert payment.due_at == ctx.now + 5 * MINUTE
        await steps.step(make.later(ctx, 5 * MINUTE), payment)
        assert (payment.state, payment.failure, payment.due_at) == (
            "REJECTED",
            "CHALLENGE_EXPIRED",
            None,
        )
        assert await make.balances(ctx, source) == (10_000, 10_000)
        assert await verify(db, ctx.programme.id) == []


async def test_a_challenge_needs_the_user_s_sms_factor(container: Container) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        alice, bob = await make.customer(ctx), await make.customer(ctx)  # no SMS factor
        source = await make.account(ctx, alice, funds=10_000)
        body = await _body(ctx, "sends", source.id, (await make.account(ctx, bob)).id, 5000)
        payment = await payments.create_send(ctx, alice.owner, body)
        with pytest.raises(Conflict) as refused:
            await sca.start_otp(ctx, alice.auth, payment)
        assert refused.value.error_code == "CHANNEL_NOT_REGISTERED"


@pytest.mark.parametrize(
    ("case", "error_code"),
    [
        ("an account of another programme", "SOURCE_AND_DESTINATION_MUST_BE_IN_SAME_PROGRAMME"),
        ("the sender's own account", "DESTINATION_BELONGS_TO_SAME_IDENTITY"),
        ("more than the balance", "FUNDS_INSUFFICIENT"),
        ("an unknown account", "DESTINATION_NOT_FOUND"),
    ],
)
async def test_a_refused_send_moves_nothing(
    container: Container, case: str, error_code: str
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container, sendsScaRequired=False)
        other = await make.new_programme(db, container)
        alice, bob = await make.customer(ctx), await make.customer(ctx)
        source = await make.account(ctx, alice, funds=1000)
        destination = await make.account(ctx, bob)
        amount, dst = 100, destination.id
        if case == "an account of another programme":
            dst = (await make.account(other, await make.customer(other))).id
        elif case == "the sender's own account":
            dst = (await make.account(ctx, alice)).id
        elif case == "more than the balance":
            amount = 1001
        elif case == "an unknown account":
            dst = 1
        with pytest.raises(Conflict) as refused:
            await payments.create_send(
                ctx, alice.owner, await _body(ctx, "sends", source.id, dst, amount)
            )
        assert refused.value.error_code == error_code
        assert await make.balances(ctx, source.id) == (1000, 1000)
        assert await make.balances(ctx, destination.id) == (0, 0)


# Outgoing wire transfers


async def _wire(
    ctx: Ctx, iban: str = GOOD_IBAN, amount: int = 5000
) -> tuple[make.Customer, int, Payment]:
    alice = await make.customer(ctx, sms=True)
    source = await make.account(ctx, alice, funds=10_000, iban=True)
    payment = await owt.create(ctx, alice.owner, await _owt_body(ctx, source.id, amount, iban))
    return alice, source.id, payment


async def test_a_wire_transfer_is_submitted_approved_and_completed(container: Container) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(
            db, container, owtScaRequired=False, owtProcessingDelaySeconds=2
        )
        settlement = await make.settlement(ctx)
        _, source, payment = await _wire(ctx)
        # A new programme's wire transfer fee is 1.00; amount + fee are held.
        assert (payment.state, payment.fee, payment.reserved) == ("SUBMITTED", 100, 5100)
        assert await make.balances(ctx, source) == (4900, 10_000)
        assert payment.due_at == ctx.now
        await steps.step(ctx, payment)
        assert payment.state == "APPROVED"
        assert payment.due_at == ctx.now + 2000
        await steps.step(make.later(ctx, 2000), payment)
        assert (payment.state, payment.reserved, payment.due_at) == ("COMPLETED", 0, None)
        assert await make.balances(ctx, source) == (4900, 4900)
        assert await make.revenue(ctx) == (100, 100)
        # The amount left the programme through its settlement account.
        assert await make.balances(ctx, settlement) == (-10_000 + 5000, -10_000 + 5000)
        assert await _ledger_state(ctx, payment.id) == "COMPLETED"
        assert await verify(db, ctx.programme.id) == []


@pytest.mark.parametrize(
    ("canned", "state", "failure"),
    [
        ("5561", "REJECTED", "REJECTED_OWT"),
        ("5553", "REJECTED", "DECLINED"),
        ("5552", "FAILED", "FAILURE"),
        ("5560", "RETURNED", "RETURN_BEFORE_COMPLETE_OWT"),
    ],
)
async def test_a_wire_transfer_that_does_not_go_through_gives_amount_and_fee_back(
    container: Container, canned: str, state: str, failure: str
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container, owtScaRequired=False)
        _, source, payment = await _wire(ctx, CANNED + canned)
        assert payment.state == "SUBMITTED"
        await steps.step(ctx, payment)
        assert (payment.state, payment.failure, payment.reserved) == (state, failure, 0)
        assert await make.balances(ctx, source) == (10_000, 10_000)
        assert await make.revenue(ctx) == (0, 0)
        assert await _ledger_state(ctx, payment.id) == state
        assert await verify(db, ctx.programme.id) == []


async def test_a_returned_wire_transfer_gives_the_amount_back(container: Container) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(
            db, container, owtScaRequired=False, owtProcessingDelaySeconds=0
        )
        _, source, payment = await _wire(ctx, CANNED + "5559")
        await steps.step(ctx, payment)
        await steps.step(ctx, payment)
        assert payment.state == "COMPLETED"
        assert await make.balances(ctx, source) == (4900, 4900)
        await steps.step(ctx, payment)
        assert payment.state == "RETURNED"
        # The fee stays unless the profile refunds it on a return.
        assert await make.balances(ctx, source) == (9900, 9900)
        assert await make.revenue(ctx) == (100, 100)
        assert await verify(db, ctx.programme.id) == []


async def test_a_wire_transfer_waits_for_sca_then_fails_when_it_expires(
    container: Container,
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        alice, source, payment = await _wire(ctx, amount=5000)
        assert payment.state == "PENDING_CHALLENGE"
        assert await make.balances(ctx, source) == (4900, 10_000)
        await sca.start_otp(ctx, alice.auth, payment)
        with pytest.raises(Conflict):
            await sca.verify_otp(make.later(ctx, 5 * MINUTE), alice.auth, payment, SANDBOX_CODE)
        assert (payment.state, payment.failure) == ("FAILED", "CHALLENGE_EXPIRED")
        assert await make.balances(ctx, source) == (10_000, 10_000)
        assert await verify(db, ctx.programme.id) == []


async def test_a_wire_transfer_verified_by_sms_is_submitted(container: Container) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        alice, source, payment = await _wire(ctx, amount=5000)
        await sca.start_otp(ctx, alice.auth, payment)
        await sca.verify_otp(ctx, alice.auth, payment, SANDBOX_CODE)
        assert payment.state == "SUBMITTED"
        assert await make.balances(ctx, source) == (4900, 10_000)


async def test_a_wire_transfer_beyond_the_balance_is_kept_invalid_and_holds_nothing(
    container: Container,
) -> None:
    """Refused for funds, the wire transfer is stored INVALID (its ref keeps the answer) and
    its refused hold leaves no trace, also when the programme's reserve account is older than
    the source account (its credit then comes first in the ledger's order) and already known
    to the server (no statement finds it)."""
    async with container.db.transaction() as db:
        ctx = await make.new_programme(db, container, owtScaRequired=False)
        for shard in range(ledger.REVENUE_SHARDS):  # the reserve accounts, before the source's
            await ledger.system_account(db, ctx.programme.id, RESERVED, "EUR", ctx.now, shard)
        alice = await make.customer(ctx)
        source = await make.account(ctx, alice, funds=1000, iban=True)
    async with container.db.sessionmaker() as db:  # as any earlier request would have
        for shard in range(ledger.REVENUE_SHARDS):
            await ledger.system_account(db, ctx.programme.id, RESERVED, "EUR", ctx.now, shard)
    async with rolled_back(container) as db:
        ctx = Ctx(db, ctx.programme, ctx.now)
        with pytest.raises(Conflict) as refused:
            await owt.create(ctx, alice.owner, await _owt_body(ctx, source.id, 901))
        assert refused.value.error_code == "FUNDS_INSUFFICIENT"
        assert refused.value.keep_changes and refused.value.store_answer
        stored = await db.scalar(
            select(Payment).where(Payment.source_id == source.id, Payment.kind == owt.OWT)
        )
        assert stored is not None
        assert (stored.state, stored.failure, stored.reserved) == (
            "INVALID",
            "INSUFFICIENT_FUNDS",
            0,
        )
        assert await make.balances(ctx, source.id) == (1000, 1000)
        assert await verify(db, ctx.programme.id) == []


@pytest.mark.parametrize(
    ("case", "error_code"),
    [
        ("an account without an IBAN", "IBAN_UPGRADE_REQUIRED"),
        ("a GBP account on SEPA", "CURRENCY_MISMATCH"),
        ("an identity no longer verified", "INSTRUMENT_DENIED_TRANSACTION"),
        ("another identity's account", "SOURCE_NOT_FOUND"),
    ],
)
async def test_a_refused_wire_transfer_moves_nothing(
    container: Container, case: str, error_code: str
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container, owtScaRequired=False)
        alice, bob = await make.customer(ctx), await make.customer(ctx)
        source = await make.account(
            ctx, alice, funds=1000, iban=case != "an account without an IBAN"
        )
        payer: Any = alice
        currency = "EUR"
        if case == "a GBP account on SEPA":
            source = await make.account(ctx, alice, "GBP", funds=1000, iban=True)
        elif case == "an identity no longer verified":
            await identities.simulate_reject(ctx, alice.identity.id, alice.identity.type, False)
        elif case == "another identity's account":
            payer = bob
        body = await _owt_body(ctx, source.id, 100, currency=currency)
        with pytest.raises(Conflict) as refused:
            await owt.create(ctx, payer.owner, body)
        assert refused.value.error_code == error_code
        assert await make.balances(ctx, source.id) == (1000, 1000)
