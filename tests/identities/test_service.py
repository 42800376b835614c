"""Corporates and consumers called as the routes call them, in one transaction that is rolled
back: a sign-up makes the identity and its root user in the programme's own profile, an e-mail
is one login per programme, due diligence moves through its states and records its webhook event
in the same transaction, e-mail and mobile codes verify only when right, and no programme
reaches another's identities. Refusals are asserted as the errorCode a client sees."""

from __future__ import annotations

import json
import re
import secrets
from typing import Any

import pytest
from sqlalchemy import func, select

from multibank.container import Container
from multibank.identities import service as identities
from multibank.identities.events import KYB, KYC
from multibank.identities.models import CONSUMER, CORPORATE, Identity
from multibank.identities.samples import consumer_signup, corporate_signup
from multibank.identities.schemas import (
    ConsumerCreate,
    ConsumerUpdate,
    CorporateCreate,
    CorporateUpdate,
)
from multibank.kernel.codes import SANDBOX_CODE
from multibank.kernel.errors import Conflict, NotFound
from multibank.kernel.notify import OutboxMessage
from multibank.programmes import service as programmes
from multibank.programmes.context import Ctx
from multibank.programmes.schemas import ProfileUpdate
from multibank.users.models import ROOT, User
from multibank.webhooks.models import PENDING, WebhookEvent
from tests import domain_factories as make
from tests.domain_factories import rolled_back

HOOKS = "https://hooks.example.com/multibank"
WRONG_CODE = "654321"
KINDS = [CORPORATE, CONSUMER]


def _email() -> str:
    return f"id{secrets.token_hex(6)}@example.com"


async def _corporate_body(ctx: Ctx, email: str | None = None, **changes: Any) -> CorporateCreate:
    body = corporate_signup(str((await make.profile(ctx, "corporate")).id), email or _email())
    return CorporateCreate.model_validate({**body, **changes})


async def _consumer_body(ctx: Ctx, email: str | None = None, **changes: Any) -> ConsumerCreate:
    body = consumer_signup(str((await make.profile(ctx, "consumer")).id), email or _email())
    return ConsumerCreate.model_validate({**body, **changes})


async def _sign_up(ctx: Ctx, kind: str, email: str | None = None) -> tuple[Identity, User]:
    if kind == CORPORATE:
        return await identities.create_corporate(ctx, await _corporate_body(ctx, email))
    return await identities.create_consumer(ctx, await _consumer_body(ctx, email))


async def _stored(ctx: Ctx, identity_id: int) -> tuple[Identity, User]:
    """The identity and its root user as the database has them now."""
    identity = await ctx.db.scalar(
        select(Identity).where(Identity.id == identity_id).execution_options(populate_existing=True)
    )
    root = await ctx.db.scalar(
        select(User)
        .where(User.identity_id == identity_id, User.role == ROOT)
        .execution_options(populate_existing=True)
    )
    assert identity is not None and root is not None
    return identity, root


async def _identities_of(ctx: Ctx) -> int:
    return int(
        await ctx.db.scalar(
            select(func.count())
            .select_from(Identity)
            .where(Identity.programme_id == ctx.programme.id)
        )
        or 0
    )


async def _messages(ctx: Ctx, recipient: str) -> list[OutboxMessage]:
    found = await ctx.db.scalars(
        select(OutboxMessage)
        .where(
            OutboxMessage.programme_id == ctx.programme.id,
            OutboxMessage.recipient == recipient,
        )
        .order_by(OutboxMessage.id)
    )
    return list(found)


async def _events(ctx: Ctx) -> list[WebhookEvent]:
    found = await ctx.db.scalars(
        select(WebhookEvent)
        .where(WebhookEvent.programme_id == ctx.programme.id)
        .order_by(WebhookEvent.id)
    )
    return list(found)


async def _refused(code: str, call: Any) -> None:
    """`call` (an awaitable) is refused with `code`."""
    with pytest.raises(Conflict) as refused:
        await call
    assert refused.value.error_code == code


# Sign-up


async def test_a_corporate_signs_up_with_its_root_user_in_the_programmes_corporate_profile(
    container: Container,
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        email = _email()
        identity, root = await identities.create_corporate(
            ctx, await _corporate_body(ctx, email, tag="acme")
        )
        profile = await make.profile(ctx, "corporate")
        assert (identity.programme_id, identity.type, identity.profile_id) == (
            ctx.programme.id,
            CORPORATE,
            profile.id,
        )
        assert (identity.tag, identity.base_currency, identity.fee_group) == (
            "acme",
            "EUR",
            "DEFAULT",
        )
        assert (identity.dd_status, identity.dd_permanently_rejected) == ("NOT_STARTED", False)
        assert identity.company is not None
        assert (identity.company["name"], identity.company["countryOfRegistration"]) == (
            "Acme Ltd",
            "GB",
        )
        assert identity.created_at == ctx.now
        assert (root.programme_id, root.identity_id, root.identity_type, root.role) == (
            ctx.programme.id,
            identity.id,
            CORPORATE,
            ROOT,
        )
        assert (root.name, root.surname, root.email, root.company_position) == (
            "Ada",
            "Lovelace",
            email,
            "DIRECTOR",
        )
        assert (root.mobile_country_code, root.mobile_number) == ("+44", "7700900123")
        # Active, but nothing proved yet and no password: `POST /passwords/{id}/create` sets it.
        assert (root.active, root.email_verified, root.mobile_verified) == (True, False, False)
        assert root.password_hash is None
        assert not identities.is_verified(identity)
        loaded, loaded_root = await identities.load(ctx, identity.id, CORPORATE)
        assert (loaded.id, loaded_root.id) == (identity.id, root.id)
        seen, seen_root = await identities.view(ctx, identity.id, CORPORATE)
        assert (seen.id, seen.tag, seen_root.id, seen_root.email) == (
            identity.id,
            "acme",
            root.id,
            email,
        )


async def test_a_consumer_signs_up_with_its_root_user_in_the_programmes_consumer_profile(
    container: Container,
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        email = _email()
        identity, root = await identities.create_consumer(ctx, await _consumer_body(ctx, email))
        profile = await make.profile(ctx, "consumer")
        assert (identity.programme_id, identity.type, identity.profile_id) == (
            ctx.programme.id,
            CONSUMER,
            profile.id,
        )
        assert (identity.company, identity.dd_status, identity.dd_level) == (
            None,
            "NOT_STARTED",
            None,
        )
        assert (root.identity_id, root.identity_type, root.role, root.email) == (
            identity.id,
            CONSUMER,
            ROOT,
            email,
        )
        assert (root.name, root.surname, root.nationality, root.occupation) == (
            "Grace",
            "Hopper",
            "MT",
            "AUDIT",
        )
        assert root.date_of_birth == {"year": 1990, "month": 1, "day": 2}
        assert (root.email_verified, root.mobile_verified) == (False, False)
        _, loaded_root = await identities.load(ctx, identity.id, CONSUMER)
        assert loaded_root.id == root.id
        # A consumer is not a corporate.
        with pytest.raises(NotFound):
            await identities.load(ctx, identity.id, CORPORATE)


async def test_a_sign_up_needs_an_active_profile_of_its_own_kind_in_its_own_programme(
    container: Container,
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        other = await make.new_programme(db, container)
        foreign = str((await make.profile(other, "corporate")).id)
        consumer_profile = str((await make.profile(ctx, "consumer")).id)
        corporate_profile = str((await make.profile(ctx, "corporate")).id)
        for profile_id in (foreign, consumer_profile, "123"):
            body = await _corporate_body(ctx, profileId=profile_id)
            await _refused("PROFILE_NOT_FOUND", identities.create_corporate(ctx, body))
        body = await _consumer_body(ctx, profileId=corporate_profile)
        await _refused("PROFILE_NOT_FOUND", identities.create_consumer(ctx, body))
        await programmes.update_profile(
            db, ctx.programme, int(corporate_profile), ProfileUpdate(active=False)
        )
        body = await _corporate_body(ctx)
        await _refused("PROFILE_INACTIVE", identities.create_corporate(ctx, body))
        assert await _identities_of(ctx) == 0


@pytest.mark.parametrize(
    ("changes", "error_code"),
    [
        ({"acceptedTerms": False}, "TERMS_NOT_ACCEPTED"),
        ({"baseCurrency": "JPY"}, "CURRENCY_UNSUPPORTED"),
        ({"feeGroup": "GOLD"}, "FEE_GROUP_INVALID"),
        (
            {"rootUser": {"mobile": {"countryCode": "+0", "number": "123"}}},
            "MOBILE_OR_COUNTRY_CODE_INVALID",
        ),
        ({"company": {"registrationCountry": "XX"}}, "COUNTRY_INVALID"),
    ],
    ids=["terms", "currency", "fee group", "mobile", "country"],
)
async def test_a_corporate_sign_up_breaking_a_rule_is_refused_and_writes_nothing(
    container: Container, changes: dict[str, Any], error_code: str
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        body = corporate_signup(str((await make.profile(ctx, "corporate")).id), _email())
        for key, value in changes.items():
            if isinstance(value, dict):
                body[key] = {**body[key], **value}
            else:
                body[key] = value
        data = CorporateCreate.model_validate(body)
        await _refused(error_code, identities.create_corporate(ctx, data))
        assert await _identities_of(ctx) == 0


async def test_a_root_email_is_one_login_in_its_programme_whatever_its_case_or_kind(
    container: Container,
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        email = _email()
        first, _ = await _sign_up(ctx, CORPORATE, email)
        for taken in (email, email.upper()):
            body = await _corporate_body(ctx, taken)
            await _refused("ROOT_EMAIL_NOT_UNIQUE", identities.create_corporate(ctx, body))
            body = await _consumer_body(ctx, taken)
            await _refused("ROOT_EMAIL_NOT_UNIQUE", identities.create_consumer(ctx, body))
        assert await _identities_of(ctx) == 1
        # Another programme is another tenant: the address is free there.
        other = await make.new_programme(db, container)
        there, root_there = await _sign_up(other, CONSUMER, email)
        assert there.id != first.id
        assert (there.programme_id, root_there.email) == (other.programme.id, email)


async def test_an_identity_of_one_programme_is_not_found_from_another(
    container: Container,
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        other = await make.new_programme(db, container)
        corporate, root = await _sign_up(ctx, CORPORATE)
        consumer, _ = await _sign_up(ctx, CONSUMER)
        for identity in (corporate, consumer):
            with pytest.raises(NotFound):
                await identities.load(other, identity.id, identity.type)
            with pytest.raises(NotFound):
                await identities.view(other, identity.id, identity.type)
            with pytest.raises(NotFound):
                await identities.send_mobile_code(other, identity.id, identity.type)
            with pytest.raises(NotFound):
                await identities.simulate_verify(other, identity.id, identity.type)
        await _refused("EMAIL_NOT_FOUND", identities.send_email_code(other, root.email, CORPORATE))
        await _refused(
            "VERIFICATION_CODE_INVALID",
            identities.verify_email(other, root.email, SANDBOX_CODE, CORPORATE),
        )
        assert await identities.holder_names(other, [corporate.id, consumer.id]) == {}
        # Nothing the other programme tried changed them.
        stored, stored_root = await _stored(ctx, corporate.id)
        assert (stored.dd_status, stored_root.email_verified) == ("NOT_STARTED", False)


async def test_an_identity_is_named_by_its_company_or_by_its_root_users_name(
    container: Container,
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        corporate, _ = await _sign_up(ctx, CORPORATE)
        consumer, _ = await _sign_up(ctx, CONSUMER)
        assert await identities.holder_names(ctx, [corporate.id, consumer.id]) == {
            corporate.id: (CORPORATE, "Acme Ltd"),
            consumer.id: (CONSUMER, "Grace Hopper"),
        }


# E-mail and mobile verification


async def test_the_right_email_code_verifies_the_root_user_and_a_wrong_one_does_not(
    container: Container,
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        identity, root = await _sign_up(ctx, CORPORATE)
        await identities.send_email_code(ctx, root.email.upper(), CORPORATE)
        sent = await _messages(ctx, root.email)
        assert [(m.channel, m.deliver) for m in sent] == [("EMAIL", False)]  # sandbox: kept
        assert SANDBOX_CODE in sent[0].body
        await _refused(
            "VERIFICATION_CODE_INVALID",
            identities.verify_email(ctx, root.email, WRONG_CODE, CORPORATE),
        )
        assert (await _stored(ctx, identity.id))[1].email_verified is False
        # A wrong guess in sandbox does not use the code up.
        await identities.verify_email(ctx, root.email, SANDBOX_CODE, CORPORATE)
        stored = (await _stored(ctx, identity.id))[1]
        assert (stored.email_verified, stored.mobile_verified) == (True, False)
        # The code is used up.
        await _refused(
            "VERIFICATION_CODE_INVALID",
            identities.verify_email(ctx, root.email, SANDBOX_CODE, CORPORATE),
        )


async def test_an_email_is_verified_only_with_a_code_sent_through_its_own_kind(
    container: Container,
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        identity, root = await _sign_up(ctx, CONSUMER)
        # No code sent yet.
        await _refused(
            "VERIFICATION_CODE_INVALID",
            identities.verify_email(ctx, root.email, SANDBOX_CODE, CONSUMER),
        )
        # A consumer's address is no corporate's, nor an unknown one anyone's.
        await _refused("EMAIL_NOT_FOUND", identities.send_email_code(ctx, root.email, CORPORATE))
        await _refused("EMAIL_NOT_FOUND", identities.send_email_code(ctx, _email(), CONSUMER))
        await identities.send_email_code(ctx, root.email, CONSUMER)
        await _refused(
            "VERIFICATION_CODE_INVALID",
            identities.verify_email(ctx, root.email, SANDBOX_CODE, CORPORATE),
        )
        # The authorised users' route (no kind) does not verify a root user.
        await _refused(
            "VERIFICATION_CODE_INVALID",
            identities.verify_email(ctx, root.email, SANDBOX_CODE, None),
        )
        assert (await _stored(ctx, identity.id))[1].email_verified is False
        await identities.verify_email(ctx, root.email, SANDBOX_CODE, CONSUMER)
        assert (await _stored(ctx, identity.id))[1].email_verified is True


async def test_a_live_programme_verifies_with_the_code_it_sent_not_the_sandbox_one(
    container: Container,
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container, mode="live")
        identity, root = await _sign_up(ctx, CORPORATE)
        await identities.send_email_code(ctx, root.email, CORPORATE)
        [sent] = await _messages(ctx, root.email)
        assert sent.deliver is True
        found = re.search(r"\b(\d{6})\b", sent.body)
        assert found is not None
        code = found.group(1)
        wrong = SANDBOX_CODE if code != SANDBOX_CODE else WRONG_CODE
        await _refused(
            "VERIFICATION_CODE_INVALID",
            identities.verify_email(ctx, root.email, wrong, CORPORATE),
        )
        assert (await _stored(ctx, identity.id))[1].email_verified is False
        await identities.verify_email(ctx, root.email, code, CORPORATE)
        assert (await _stored(ctx, identity.id))[1].email_verified is True


@pytest.mark.parametrize("kind", KINDS)
async def test_the_right_mobile_code_verifies_the_root_users_mobile_and_a_wrong_one_does_not(
    container: Container, kind: str
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        identity, root = await _sign_up(ctx, kind)
        await _refused(
            "VERIFICATION_CODE_INVALID",
            identities.verify_mobile(ctx, identity.id, kind, SANDBOX_CODE),
        )
        # (timeLeftForRetry in seconds, retriesLeft)
        assert await identities.send_mobile_code(ctx, identity.id, kind) == (15, 5)
        number = f"{root.mobile_country_code}{root.mobile_number}"
        sent = await _messages(ctx, number)
        assert [m.channel for m in sent] == ["SMS"]
        assert SANDBOX_CODE in sent[0].body
        await _refused(
            "VERIFICATION_CODE_INVALID",
            identities.verify_mobile(ctx, identity.id, kind, WRONG_CODE),
        )
        assert (await _stored(ctx, identity.id))[1].mobile_verified is False
        await identities.verify_mobile(ctx, identity.id, kind, SANDBOX_CODE)
        stored = (await _stored(ctx, identity.id))[1]
        assert (stored.mobile_verified, stored.email_verified) == (True, False)
        # Verified once, it is not sent or verified again.
        await _refused(
            "ALREADY_VERIFIED",
            identities.send_mobile_code(make.later(ctx, 60_000), identity.id, kind),
        )
        await _refused(
            "VERIFICATION_CODE_INVALID",
            identities.verify_mobile(ctx, identity.id, kind, SANDBOX_CODE),
        )


async def test_a_mobile_code_is_sent_again_only_fifteen_seconds_later(
    container: Container,
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        identity, root = await _sign_up(ctx, CORPORATE)
        await identities.send_mobile_code(ctx, identity.id, CORPORATE)
        await _refused(
            "FREQUENCY_EXCEEDED",
            identities.send_mobile_code(make.later(ctx, 14_999), identity.id, CORPORATE),
        )
        await identities.send_mobile_code(make.later(ctx, 15_000), identity.id, CORPORATE)
        number = f"{root.mobile_country_code}{root.mobile_number}"
        assert len(await _messages(ctx, number)) == 2


async def test_a_new_email_is_unverified_and_a_code_sent_to_the_old_one_does_not_verify_it(
    container: Container,
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        identity, root = await _sign_up(ctx, CORPORATE)
        await identities.send_email_code(ctx, root.email, CORPORATE)
        await identities.verify_email(ctx, root.email, SANDBOX_CODE, CORPORATE)
        await identities.send_email_code(ctx, root.email, CORPORATE)  # a code still unused
        new = _email()
        await identities.update_corporate(ctx, identity.id, CorporateUpdate(email=new))
        stored = (await _stored(ctx, identity.id))[1]
        assert (stored.email, stored.email_key, stored.email_verified) == (new, new, False)
        await _refused(
            "VERIFICATION_CODE_INVALID",
            identities.verify_email(ctx, new, SANDBOX_CODE, CORPORATE),
        )
        assert (await _stored(ctx, identity.id))[1].email_verified is False
        await identities.send_email_code(ctx, new, CORPORATE)
        await identities.verify_email(ctx, new, SANDBOX_CODE, CORPORATE)
        assert (await _stored(ctx, identity.id))[1].email_verified is True
        # An address another user has is refused, and changes nothing.
        _, bob = await _sign_up(ctx, CONSUMER)
        await _refused(
            "EMAIL_NOT_UNIQUE",
            identities.update_corporate(ctx, identity.id, CorporateUpdate(email=bob.email)),
        )
        assert (await _stored(ctx, identity.id))[1].email == new


async def test_the_root_users_personal_details_are_locked_once_due_diligence_is_approved(
    container: Container,
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        corporate, _ = await _sign_up(ctx, CORPORATE)
        consumer, _ = await _sign_up(ctx, CONSUMER)
        # Before approval the root user's details change.
        await identities.update_corporate(ctx, corporate.id, CorporateUpdate(name="Augusta"))
        await identities.update_consumer(ctx, consumer.id, ConsumerUpdate(surname="Murray"))
        assert (await _stored(ctx, corporate.id))[1].name == "Augusta"
        assert (await _stored(ctx, consumer.id))[1].surname == "Murray"
        await identities.simulate_verify(ctx, corporate.id, CORPORATE)
        await identities.simulate_verify(ctx, consumer.id, CONSUMER)
        await _refused(
            "ROOT_USER_ALREADY_VERIFIED",
            identities.update_corporate(ctx, corporate.id, CorporateUpdate(surname="King")),
        )
        address = {"addressLine1": "3 Side St", "city": "Mdina", "country": "MT"}
        await _refused(
            "CONSUMER_VERIFIED",
            identities.update_consumer(
                ctx, consumer.id, ConsumerUpdate.model_validate({"address": address})
            ),
        )
        stored_corporate = await _stored(ctx, corporate.id)
        assert stored_corporate[1].surname == "Lovelace"
        stored_consumer = await _stored(ctx, consumer.id)
        assert stored_consumer[1].address is not None
        assert stored_consumer[1].address["city"] == "Valletta"
        # The identity's own fields stay editable, and a corporate root user's date of birth.
        birth = {"year": 1981, "month": 1, "day": 1}
        await identities.update_corporate(
            ctx,
            corporate.id,
            CorporateUpdate.model_validate({"tag": "later", "dateOfBirth": birth}),
        )
        identity, root = await _stored(ctx, corporate.id)
        assert (identity.tag, root.date_of_birth) == ("later", birth)


# Due diligence


@pytest.mark.parametrize("kind", KINDS)
async def test_simulate_verify_approves_due_diligence_and_proves_email_and_mobile(
    container: Container, kind: str
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        identity, _ = await _sign_up(ctx, kind)
        await identities.simulate_verify(ctx, identity.id, kind)
        stored, root = await _stored(ctx, identity.id)
        assert stored.dd_status == "APPROVED"
        assert (root.email_verified, root.mobile_verified) == (True, True)
        assert identities.is_verified(stored)
        # A consumer approved without a level asked for is at level 2.
        assert stored.dd_level == ("KYC_LEVEL_2" if kind == CONSUMER else None)
        prefix = "KYB" if kind == CORPORATE else "KYC"
        await _refused(
            f"{prefix}_ALREADY_APPROVED",
            identities.start_due_diligence(ctx, identity.id, kind, None),
        )


@pytest.mark.parametrize("kind", KINDS)
async def test_due_diligence_starts_once_the_email_is_verified_and_resumes_its_session(
    container: Container, kind: str
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        identity, root = await _sign_up(ctx, kind)
        await _refused(
            "EMAIL_UNVERIFIED", identities.start_due_diligence(ctx, identity.id, kind, None)
        )
        assert (await _stored(ctx, identity.id))[0].dd_status == "NOT_STARTED"
        await identities.send_email_code(ctx, root.email, kind)
        await identities.verify_email(ctx, root.email, SANDBOX_CODE, kind)
        reference = await identities.start_due_diligence(ctx, identity.id, kind, None)
        stored = (await _stored(ctx, identity.id))[0]
        assert (stored.dd_status, stored.dd_reference) == ("INITIATED", reference)
        assert not identities.is_verified(stored)
        # Starting again resumes the session already opened.
        assert await identities.start_due_diligence(ctx, identity.id, kind, None) == reference


@pytest.mark.parametrize("kind", KINDS)
async def test_due_diligence_pending_review_or_approved_does_not_start_again(
    container: Container, kind: str
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        identity, root = await _sign_up(ctx, kind)
        await identities.send_email_code(ctx, root.email, kind)
        await identities.verify_email(ctx, root.email, SANDBOX_CODE, kind)
        reference = await identities.start_due_diligence(ctx, identity.id, kind, None)
        prefix = "KYB" if kind == CORPORATE else "KYC"
        # The provider's verdicts, as the sandbox page gives them.
        for status, refusal in (
            ("PENDING_REVIEW", f"{prefix}_PENDING_REVIEW"),
            ("APPROVED", f"{prefix}_ALREADY_APPROVED"),
        ):
            await identities.decide(ctx, identity, status)
            await _refused(refusal, identities.start_due_diligence(ctx, identity.id, kind, None))
            stored = (await _stored(ctx, identity.id))[0]
            assert (stored.dd_status, stored.dd_reference) == (status, reference)


@pytest.mark.parametrize("kind", KINDS)
async def test_a_rejection_may_start_again_but_a_permanent_one_may_not(
    container: Container, kind: str
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        identity, root = await _sign_up(ctx, kind)
        await identities.send_email_code(ctx, root.email, kind)
        await identities.verify_email(ctx, root.email, SANDBOX_CODE, kind)
        first = await identities.start_due_diligence(ctx, identity.id, kind, None)
        await identities.simulate_reject(ctx, identity.id, kind, False)
        stored = (await _stored(ctx, identity.id))[0]
        assert (stored.dd_status, stored.dd_permanently_rejected) == ("REJECTED", False)
        assert not identities.is_verified(stored)
        second = await identities.start_due_diligence(ctx, identity.id, kind, None)
        assert second != first
        assert (await _stored(ctx, identity.id))[0].dd_status == "INITIATED"
        await identities.simulate_reject(ctx, identity.id, kind, True)
        stored = (await _stored(ctx, identity.id))[0]
        assert (stored.dd_status, stored.dd_permanently_rejected) == ("REJECTED", True)
        refusal = "KYB_PERMANENTLY_REJECTED" if kind == CORPORATE else "KYC_REJECTED"
        await _refused(refusal, identities.start_due_diligence(ctx, identity.id, kind, None))
        stored = (await _stored(ctx, identity.id))[0]
        assert (stored.dd_status, stored.dd_reference) == ("REJECTED", second)


async def test_a_consumer_starts_kyc_at_a_level_and_another_level_opens_a_new_session(
    container: Container,
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        identity, root = await _sign_up(ctx, CONSUMER)
        await identities.send_email_code(ctx, root.email, CONSUMER)
        await identities.verify_email(ctx, root.email, SANDBOX_CODE, CONSUMER)
        first = await identities.start_due_diligence(ctx, identity.id, CONSUMER, "KYC_LEVEL_1")
        assert (await _stored(ctx, identity.id))[0].dd_level == "KYC_LEVEL_1"
        # No level, or the same one, resumes it.
        for level in (None, "KYC_LEVEL_1"):
            assert await identities.start_due_diligence(ctx, identity.id, CONSUMER, level) == first
        second = await identities.start_due_diligence(ctx, identity.id, CONSUMER, "KYC_LEVEL_2")
        assert second != first
        stored = (await _stored(ctx, identity.id))[0]
        assert (stored.dd_status, stored.dd_level, stored.dd_reference) == (
            "INITIATED",
            "KYC_LEVEL_2",
            second,
        )


async def test_each_due_diligence_decision_records_its_webhook_event(
    container: Container,
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container, webhookUrl=HOOKS)
        corporate, corporate_root = await _sign_up(ctx, CORPORATE)
        consumer, consumer_root = await _sign_up(ctx, CONSUMER)
        assert await _events(ctx) == []  # a sign-up is no due diligence event
        await identities.decide(ctx, corporate, "PENDING_REVIEW")
        await identities.simulate_verify(ctx, corporate.id, CORPORATE)
        await identities.simulate_reject(ctx, consumer.id, CONSUMER, False)
        events = await _events(ctx)
        assert [(e.path, e.event_type, e.resource) for e in events] == [
            (KYB, "corporates/kyb.PENDING_REVIEW", f"corporates:{corporate.id}"),
            (KYB, "corporates/kyb.APPROVED", f"corporates:{corporate.id}"),
            (KYC, "consumers/kyc.REJECTED", f"consumers:{consumer.id}"),
        ]
        assert {(e.state, e.attempts, e.next_attempt_at) for e in events} == {(PENDING, 0, ctx.now)}
        approved, rejected = json.loads(events[1].payload), json.loads(events[2].payload)
        assert (approved["corporateId"], approved["corporateEmail"], approved["status"]) == (
            str(corporate.id),
            corporate_root.email,
            "APPROVED",
        )
        assert (rejected["consumerId"], rejected["consumerEmail"], rejected["status"]) == (
            str(consumer.id),
            consumer_root.email,
            "REJECTED",
        )


async def test_a_decision_and_its_event_are_kept_or_rolled_back_together(
    container: Container,
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container, webhookUrl=HOOKS)
        identity, _ = await _sign_up(ctx, CORPORATE)
        # Read before the savepoint: its rollback expires what it changed.
        identity_id = identity.id
        with pytest.raises(RuntimeError):
            async with db.begin_nested():
                await identities.simulate_verify(ctx, identity_id, CORPORATE)
                assert [e.event_type for e in await _events(ctx)] == ["corporates/kyb.APPROVED"]
                raise RuntimeError("the request fails after the decision")
        stored, root = await _stored(ctx, identity_id)
        assert (stored.dd_status, root.email_verified) == ("NOT_STARTED", False)
        assert await _events(ctx) == []
        await identities.simulate_verify(ctx, identity_id, CORPORATE)
        assert (await _stored(ctx, identity_id))[0].dd_status == "APPROVED"
        assert [e.event_type for e in await _events(ctx)] == ["corporates/kyb.APPROVED"]


async def test_a_programme_without_a_webhook_url_records_no_event(
    container: Container,
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        identity, _ = await _sign_up(ctx, CONSUMER)
        await identities.simulate_verify(ctx, identity.id, CONSUMER)
        assert (await _stored(ctx, identity.id))[0].dd_status == "APPROVED"
        assert await _events(ctx) == []
