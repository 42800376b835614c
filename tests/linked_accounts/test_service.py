"""The linked-account service (D39) below HTTP: the reference's forms, and the functions the
batch challenge calls for the root user's declaration (`awaiting_declaration`,
`declaration_passed`), with what they settle."""

from __future__ import annotations

from typing import Any

import pytest

from multibank.kernel.errors import Conflict, NotFound
from multibank.linked_accounts import repository, service
from multibank.linked_accounts.models import (
    ACTIVE,
    COMPLETED,
    DECLARATION,
    PENDING_VERIFICATION,
    RUN_VERIFIED,
)
from multibank.linked_accounts.schemas import AccountReferenceWrite, LinkedAccountCreate
from tests.domain_factories import account, customer, new_programme, rolled_back

IBAN = "DE89370400440532013000"


@pytest.mark.parametrize(
    ("reference", "code"),
    [
        ({"iban": IBAN, "accountNumber": "12345678"}, "ACCOUNT_NUMBER_AND_IBAN_PROVIDED"),
        ({"iban": IBAN, "sortCode": "123456"}, "SORT_CODE_AND_IBAN_PROVIDED"),
        ({"accountNumber": "12345678"}, "SORT_CODE_MISSING"),
        ({"sortCode": "123456"}, "ACCOUNT_NUMBER_MISSING"),
        ({}, "NO_ACCOUNT_DETAILS_PROVIDED"),
        ({"accountDescriptor": "  "}, "ACCOUNT_DESCRIPTOR_MISSING"),
    ],
)
def test_a_reference_has_exactly_one_form(reference: dict[str, str], code: str) -> None:
    with pytest.raises(Conflict) as refused:
        service.reference_form(AccountReferenceWrite(**reference))
    assert refused.value.error_code == code


def test_the_forms_and_their_keys() -> None:
    form = service.reference_form
    assert form(AccountReferenceWrite(iban=IBAN))[0::2] == ("IBAN", f"IBAN:{IBAN}")
    uk = AccountReferenceWrite(accountNumber="12345678", sortCode="123456")
    assert form(uk)[0::2] == ("UK", "UK:123456:12345678")
    assert form(AccountReferenceWrite(accountDescriptor=" x "))[1] == {"accountDescriptor": "x"}


def body(**over: Any) -> LinkedAccountCreate:
    data = {
        "name": "Acme Ltd",
        "type": "BUSINESS",
        "country": "DE",
        "accountReference": {"iban": IBAN},
        **over,
    }
    return LinkedAccountCreate(**data)


async def test_the_declaration_passed_completes_its_step_and_the_last_step_the_run(container):
    async with rolled_back(container) as db:
        ctx = await new_programme(db, container)
        owner = await customer(ctx)
        await account(ctx, owner, iban=True)
        who = service.Owner(owner.identity.id, owner.identity.type)
        linked = await service.create(ctx, who, body())
        other = await service.create(ctx, who, body(accountReference={"accountDescriptor": "x"}))

        # The batch challenge's lookup: the identity's accounts awaiting the declaration.
        found = await service.awaiting_declaration(
            ctx, owner.identity.id, [str(other.id), str(linked.id)]
        )
        assert [a.id for a in found] == sorted([linked.id, other.id])
        stranger = await customer(ctx)
        with pytest.raises(NotFound):
            await service.awaiting_declaration(ctx, stranger.identity.id, [str(linked.id)])
        with pytest.raises(NotFound):
            await service.awaiting_declaration(ctx, owner.identity.id, [str(linked.id), "1"])

        await service.declaration_passed(ctx, linked)
        _, [view] = await service.runs(ctx, linked, (), 0, None)
        steps = {s.step: s for s in view.steps}
        assert steps[DECLARATION].status == COMPLETED
        assert steps[DECLARATION].completed_at == ctx.now
        assert linked.state == PENDING_VERIFICATION
        # No longer awaiting it: 404 (or, asked so, D37's STATE_INVALID).
        with pytest.raises(NotFound):
            await service.awaiting_declaration(ctx, owner.identity.id, [str(linked.id)])
        with pytest.raises(Conflict) as refused:
            await service.awaiting_declaration(
                ctx, owner.identity.id, [str(linked.id)], refuse_state=True
            )
        assert refused.value.error_code == "STATE_INVALID"

        await service.simulate_verify(
            ctx, linked.id, ["TRANSFER_INSTRUCTION", "INTERNAL_CHECKS"], "COMPLETED"
        )
        assert linked.state == ACTIVE
        _, [view] = await service.runs(ctx, linked, (), 0, None)
        assert view.run.state == RUN_VERIFIED
        assert view.run.completed_at == ctx.now
        # A second pass changes nothing.
        await service.declaration_passed(ctx, linked)
        assert linked.state == ACTIVE


async def test_the_limit_counts_every_account_not_removed(container):
    async with rolled_back(container) as db:
        ctx = await new_programme(db, container)
        owner = await customer(ctx)
        await account(ctx, owner, iban=True)
        who = service.Owner(owner.identity.id, owner.identity.type)
        made = []
        for i in range(service.MAX_KEPT):
            ref = {"accountDescriptor": f"account {i}"}
            made.append(await service.create(ctx, who, body(accountReference=ref)))
        await service.simulate_set(ctx, made[0].id, "REJECTED")  # rejected still counts
        with pytest.raises(Conflict) as refused:
            await service.create(ctx, who, body())
        assert refused.value.error_code == "MODEL_CONSTRAINTS_VIOLATED"
        await service.remove(ctx, made[1])
        await service.create(ctx, who, body())
        total = await repository.count_kept(db, ctx.programme.id, owner.identity.id)
        assert total == service.MAX_KEPT
