"""Authorised users called as the routes call them, in one transaction that is rolled back: a
user is made for the caller's own identity with an e-mail unique in the programme, only that
identity finds it, a changed address or number is unverified again, deactivation ends its
sessions, and its invite is sent, validated and consumed once (setting the first password and
logging the user in), within thirty days. Refusals are asserted as the errorCode a client sees."""

from __future__ import annotations

import secrets
from typing import Any

import pytest
from sqlalchemy import select

from multibank.access import service as access
from multibank.container import Container
from multibank.factors import service as factors
from multibank.identities import service as identities
from multibank.identities.models import CONSUMER, CORPORATE
from multibank.kernel.codes import SANDBOX_CODE
from multibank.kernel.errors import Conflict, Forbidden, NotFound
from multibank.kernel.notify import OutboxMessage
from multibank.kernel.tokens import AuthSession
from multibank.programmes.context import Ctx
from multibank.users import service as users
from multibank.users.models import USER, User
from multibank.users.schemas import UserCreate, UserUpdate
from tests import domain_factories as make
from tests.domain_factories import rolled_back

PASSWORD = "Sup3r-secret!"
WRONG_CODE = "654321"
DAY = 86_400_000


def _email() -> str:
    return f"user{secrets.token_hex(6)}@example.com"


async def _refused(code: str, call: Any) -> None:
    """`call` (an awaitable) is refused with `code`."""
    with pytest.raises(Conflict) as refused:
        await call
    assert refused.value.error_code == code


async def _stored(ctx: Ctx, user_id: int) -> User:
    found = await ctx.db.scalar(
        select(User).where(User.id == user_id).execution_options(populate_existing=True)
    )
    assert found is not None
    return found


async def _session(ctx: Ctx, session_id: int) -> AuthSession:
    found = await ctx.db.scalar(
        select(AuthSession)
        .where(AuthSession.id == session_id)
        .execution_options(populate_existing=True)
    )
    assert found is not None
    return found


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


# Creating, finding and changing users


@pytest.mark.parametrize("kind", [CORPORATE, CONSUMER])
async def test_an_authorised_user_is_made_for_the_callers_identity_without_a_password(
    container: Container, kind: str
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        alice = await make.customer(ctx, kind)
        email = _email()
        data = UserCreate.model_validate(
            {
                "name": "Mary",
                "surname": "Jackson",
                "email": email,
                "mobile": {"countryCode": "+356", "number": "79111111"},
                "dateOfBirth": {"year": 1985, "month": 4, "day": 9},
            }
        )
        user = await users.create(ctx, alice.auth, data)
        assert (user.programme_id, user.identity_id, user.identity_type, user.role) == (
            ctx.programme.id,
            alice.identity.id,
            kind,
            USER,
        )
        assert (user.name, user.surname, user.email, user.email_key) == (
            "Mary",
            "Jackson",
            email,
            email,
        )
        assert (user.mobile_country_code, user.mobile_number) == ("+356", "79111111")
        assert user.date_of_birth == {"year": 1985, "month": 4, "day": 9}
        assert (user.active, user.email_verified, user.mobile_verified) == (True, False, False)
        assert (user.invite_state, user.password_hash) == ("NONE", None)
        assert (await users.get(ctx, alice.auth, str(user.id))).id == user.id
        # The identity's list has its authorised users, not its root user.
        count, found = await users.page(ctx, alice.auth, 0, None, None, None)
        assert (count, [u.id for u in found]) == (1, [user.id])


async def test_an_email_in_use_anywhere_in_the_programme_is_refused_for_a_new_user(
    container: Container,
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        alice, bob = await make.customer(ctx), await make.customer(ctx, CONSUMER)
        mary = await make.authorised_user(ctx, alice)
        for taken in (bob.root.email, bob.root.email.upper(), mary.email, alice.root.email):
            body = {"name": "Ann", "surname": "Smith", "email": taken}
            await _refused(
                "EMAIL_NOT_UNIQUE", users.create(ctx, alice.auth, UserCreate.model_validate(body))
            )
        assert (await users.page(ctx, alice.auth, 0, None, None, None))[0] == 1
        # Another programme's users are another tenant's.
        other = await make.new_programme(db, container)
        carol = await make.customer(other)
        there = await make.authorised_user(other, carol, email=mary.email)
        assert (there.programme_id, there.email) == (other.programme.id, mary.email)


async def test_a_mobile_is_unique_within_its_identity_only(container: Container) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        alice, bob = await make.customer(ctx), await make.customer(ctx)
        mobile = ("+356", "79111111")
        await make.authorised_user(ctx, alice, mobile=mobile)
        with pytest.raises(Conflict) as refused:
            await make.authorised_user(ctx, alice, mobile=mobile)
        assert refused.value.error_code == "MOBILE_NOT_UNIQUE"
        # The root user's number counts too.
        root_mobile = (str(alice.root.mobile_country_code), str(alice.root.mobile_number))
        with pytest.raises(Conflict) as refused:
            await make.authorised_user(ctx, alice, mobile=root_mobile)
        assert refused.value.error_code == "MOBILE_NOT_UNIQUE"
        with pytest.raises(Conflict) as refused:
            await make.authorised_user(ctx, alice, mobile=("+0", "79222222"))
        assert refused.value.error_code == "MOBILE_OR_COUNTRY_CODE_INVALID"
        assert (await users.page(ctx, alice.auth, 0, None, None, None))[0] == 1
        # Another identity's user may have the same number.
        other = await make.authorised_user(ctx, bob, mobile=mobile)
        assert (other.identity_id, other.mobile_number) == (bob.identity.id, "79111111")


async def test_a_user_is_found_and_changed_only_by_its_own_identity(
    container: Container,
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        alice, bob = await make.customer(ctx), await make.customer(ctx)
        mary = await make.authorised_user(ctx, alice)
        for caller, user_id in (
            (bob.auth, str(mary.id)),  # another identity's user
            (alice.auth, str(alice.root.id)),  # a root user is no authorised user
            (alice.auth, "123"),
            (alice.auth, "not-an-id"),
        ):
            with pytest.raises(NotFound):
                await users.get(ctx, caller, user_id)
        with pytest.raises(NotFound):
            await users.update(ctx, bob.auth, str(mary.id), UserUpdate(name="Eve"))
        with pytest.raises(NotFound):
            await users.set_active(ctx, bob.auth, str(mary.id), False)
        with pytest.raises(NotFound):
            await users.send_invite(ctx, bob.auth, str(mary.id))
        assert (await users.page(ctx, bob.auth, 0, None, None, None))[0] == 0
        stored = await _stored(ctx, mary.id)
        assert (stored.name, stored.active, stored.invite_state) == ("Mary", True, "NONE")
        # And not from another programme.
        other = await make.new_programme(db, container)
        with pytest.raises(NotFound):
            await users.invitee(other, str(mary.id))


async def test_the_user_list_pages_in_order_and_filters_by_active_and_email(
    container: Container,
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        alice = await make.customer(ctx)
        made = [await make.authorised_user(ctx, alice) for _ in range(3)]
        await users.set_active(ctx, alice.auth, str(made[1].id), False)
        ids = [u.id for u in made]

        async def listed(offset: int = 0, limit: int | None = None, **filters: Any) -> Any:
            active, email = filters.get("active"), filters.get("email")
            count, found = await users.page(ctx, alice.auth, offset, limit, active, email)
            return count, [u.id for u in found]

        assert await listed() == (3, sorted(ids))
        assert await listed(1, 1) == (3, [sorted(ids)[1]])
        assert await listed(active=True) == (2, sorted([ids[0], ids[2]]))
        assert await listed(active=False) == (1, [ids[1]])
        assert await listed(email=made[2].email.upper()) == (1, [ids[2]])
        assert await listed(email=alice.root.email) == (0, [])


async def test_an_authorised_users_email_is_verified_with_its_code_and_not_as_a_root_users(
    container: Container,
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        alice = await make.customer(ctx)
        mary = await make.authorised_user(ctx, alice)
        # The users' route sends to authorised users only.
        await _refused("EMAIL_NOT_FOUND", users.send_email_code(ctx, alice.root.email))
        await _refused("EMAIL_NOT_FOUND", users.send_email_code(ctx, _email()))
        await users.send_email_code(ctx, mary.email)
        [sent] = await _messages(ctx, mary.email)
        assert (sent.channel, SANDBOX_CODE in sent.body) == ("EMAIL", True)
        # Its code is not verified through the corporates' route, nor when wrong.
        for code, kind in ((SANDBOX_CODE, CORPORATE), (WRONG_CODE, None)):
            await _refused(
                "VERIFICATION_CODE_INVALID", identities.verify_email(ctx, mary.email, code, kind)
            )
        assert (await _stored(ctx, mary.id)).email_verified is False
        await identities.verify_email(ctx, mary.email, SANDBOX_CODE, None)
        assert (await _stored(ctx, mary.id)).email_verified is True


async def test_a_changed_email_or_mobile_is_unverified_again(container: Container) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        alice = await make.customer(ctx)
        mary = await make.authorised_user(ctx, alice, mobile=("+356", "79111111"))
        await users.send_email_code(ctx, mary.email)
        await identities.verify_email(ctx, mary.email, SANDBOX_CODE, None)
        # Her SMS factor proves her mobile.
        auth = await access.open_user_session(ctx, mary)
        await factors.enrol_sms_start(ctx, auth)
        await factors.enrol_sms_verify(ctx, auth, SANDBOX_CODE)
        stored = await _stored(ctx, mary.id)
        assert (stored.email_verified, stored.mobile_verified) == (True, True)
        # Name alone changes nothing proved.
        await users.update(ctx, alice.auth, str(mary.id), UserUpdate(name="Mae"))
        stored = await _stored(ctx, mary.id)
        assert (stored.name, stored.email_verified, stored.mobile_verified) == ("Mae", True, True)
        await users.send_email_code(ctx, mary.email)  # a code still unused
        new = _email()
        data = UserUpdate.model_validate(
            {"email": new, "mobile": {"countryCode": "+356", "number": "79222222"}}
        )
        await users.update(ctx, alice.auth, str(mary.id), data)
        stored = await _stored(ctx, mary.id)
        assert (stored.email, stored.email_key, stored.mobile_number) == (new, new, "79222222")
        assert (stored.email_verified, stored.mobile_verified) == (False, False)
        # The code sent to the old address does not prove the new one.
        await _refused(
            "VERIFICATION_CODE_INVALID", identities.verify_email(ctx, new, SANDBOX_CODE, None)
        )
        # An address in use is refused, and changes nothing.
        await _refused(
            "EMAIL_NOT_UNIQUE",
            users.update(ctx, alice.auth, str(mary.id), UserUpdate(email=alice.root.email)),
        )
        assert (await _stored(ctx, mary.id)).email == new


async def test_deactivating_a_user_ends_its_sessions_and_activating_restores_its_logins(
    container: Container,
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        alice = await make.customer(ctx)
        mary, june = await make.authorised_user(ctx, alice), await make.authorised_user(ctx, alice)
        first = await access.open_user_session(ctx, mary)
        second = await access.open_user_session(ctx, mary, "ACCESS")
        june_session = await access.open_user_session(ctx, june)
        mary.failed_logins = 2  # as two wrong passwords leave it
        await db.flush()
        await users.set_active(ctx, alice.auth, str(mary.id), False)
        assert (await _stored(ctx, mary.id)).active is False
        for session in (first, second):
            assert (await _session(ctx, session.id)).ended_at == ctx.now
        # Nobody else's sessions end.
        for session in (june_session, alice.auth):
            assert (await _session(ctx, session.id)).ended_at is None
        later = make.later(ctx, 1_000)
        await users.set_active(later, alice.auth, str(mary.id), True)
        stored = await _stored(ctx, mary.id)
        assert (stored.active, stored.failed_logins) == (True, 0)
        # Ended sessions stay ended: the user logs in again.
        assert (await _session(ctx, first.id)).ended_at == ctx.now


# Invites


async def test_an_invite_is_sent_validated_and_consumed_once_setting_the_first_password(
    container: Container,
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        alice = await make.customer(ctx)
        mary = await make.authorised_user(ctx, alice)
        await users.send_invite(ctx, alice.auth, str(mary.id))
        assert (await _stored(ctx, mary.id)).invite_state == "SENT"
        [sent] = await _messages(ctx, mary.email)
        assert sent.channel == "EMAIL"
        assert str(mary.id) in sent.body and SANDBOX_CODE in sent.body
        # Validating does not use the invite up.
        for _ in range(2):
            await users.validate_invite(ctx, str(mary.id), SANDBOX_CODE)
        session = await access.consume_invite(
            ctx, container.hasher, str(mary.id), SANDBOX_CODE, PASSWORD
        )
        assert (session.user_id, session.credential_type, session.token_type) == (
            mary.id,
            USER,
            "AUTH",
        )
        assert (session.identity_id, session.identity_type) == (alice.identity.id, CORPORATE)
        assert session.ended_at is None
        stored = await _stored(ctx, mary.id)
        assert (stored.invite_state, stored.email_verified) == ("CONSUMED", True)
        assert await container.hasher.verify(stored.password_hash, PASSWORD)
        logged_in = await access.login(ctx, container.hasher, mary.email, PASSWORD)
        assert logged_in.user.id == mary.id
        # Once consumed, the invite is neither valid nor sent again.
        await _refused(
            "INVITE_OR_INVITE_CODE_INVALID", users.validate_invite(ctx, str(mary.id), SANDBOX_CODE)
        )
        await _refused(
            "INVITE_OR_INVITE_CODE_INVALID",
            access.consume_invite(
                ctx, container.hasher, str(mary.id), SANDBOX_CODE, "An0ther-secret!"
            ),
        )
        await _refused("INVITE_ALREADY_CONSUMED", users.send_invite(ctx, alice.auth, str(mary.id)))
        assert await container.hasher.verify((await _stored(ctx, mary.id)).password_hash, PASSWORD)


async def test_an_invite_not_sent_or_a_wrong_code_or_a_weak_password_leaves_the_invite_usable(
    container: Container,
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        alice = await make.customer(ctx)
        mary = await make.authorised_user(ctx, alice)
        uid = str(mary.id)
        await _refused(
            "INVITE_OR_INVITE_CODE_INVALID", users.validate_invite(ctx, uid, SANDBOX_CODE)
        )
        await _refused(
            "INVITE_OR_INVITE_CODE_INVALID",
            access.consume_invite(ctx, container.hasher, uid, SANDBOX_CODE, PASSWORD),
        )
        await users.send_invite(ctx, alice.auth, uid)
        await _refused("INVITE_OR_INVITE_CODE_INVALID", users.validate_invite(ctx, uid, WRONG_CODE))
        await _refused(
            "INVITE_OR_INVITE_CODE_INVALID",
            access.consume_invite(ctx, container.hasher, uid, WRONG_CODE, PASSWORD),
        )
        await _refused(
            "PASSWORD_TOO_SHORT",
            access.consume_invite(ctx, container.hasher, uid, SANDBOX_CODE, "Sh0rt!"),
        )
        stored = await _stored(ctx, mary.id)
        assert (stored.invite_state, stored.password_hash, stored.email_verified) == (
            "SENT",
            None,
            False,
        )
        await users.validate_invite(ctx, uid, SANDBOX_CODE)
        await access.consume_invite(ctx, container.hasher, uid, SANDBOX_CODE, PASSWORD)
        assert (await _stored(ctx, mary.id)).invite_state == "CONSUMED"


async def test_a_deactivated_user_consumes_its_invite_only_once_active_again(
    container: Container,
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        alice = await make.customer(ctx)
        mary = await make.authorised_user(ctx, alice)
        uid = str(mary.id)
        await users.send_invite(ctx, alice.auth, uid)
        await users.set_active(ctx, alice.auth, uid, False)
        with pytest.raises(Forbidden):
            await access.consume_invite(ctx, container.hasher, uid, SANDBOX_CODE, PASSWORD)
        stored = await _stored(ctx, mary.id)
        assert (stored.invite_state, stored.password_hash) == ("SENT", None)
        await users.set_active(ctx, alice.auth, uid, True)
        session = await access.consume_invite(ctx, container.hasher, uid, SANDBOX_CODE, PASSWORD)
        assert session.user_id == mary.id
        assert (await _stored(ctx, mary.id)).invite_state == "CONSUMED"


async def test_an_invite_lasts_thirty_days_and_a_new_one_may_be_sent(
    container: Container,
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        alice = await make.customer(ctx)
        mary = await make.authorised_user(ctx, alice)
        uid = str(mary.id)
        await users.send_invite(ctx, alice.auth, uid)
        await users.validate_invite(make.later(ctx, 30 * DAY - 1), uid, SANDBOX_CODE)
        expired = make.later(ctx, 30 * DAY)
        await _refused(
            "INVITE_OR_INVITE_CODE_INVALID", users.validate_invite(expired, uid, SANDBOX_CODE)
        )
        await _refused(
            "INVITE_OR_INVITE_CODE_INVALID",
            access.consume_invite(expired, container.hasher, uid, SANDBOX_CODE, PASSWORD),
        )
        assert (await _stored(ctx, mary.id)).password_hash is None
        await users.send_invite(expired, alice.auth, uid)
        await access.consume_invite(expired, container.hasher, uid, SANDBOX_CODE, PASSWORD)
        assert (await _stored(ctx, mary.id)).invite_state == "CONSUMED"
        assert len(await _messages(ctx, mary.email)) == 2


async def test_a_root_user_has_no_invite(container: Container) -> None:
    """Root users set their first password with `POST /passwords/{id}/create`, not an invite."""
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        alice = await make.customer(ctx)
        root = str(alice.root.id)
        with pytest.raises(NotFound):
            await users.send_invite(ctx, alice.auth, root)
        with pytest.raises(NotFound):
            await users.validate_invite(ctx, root, SANDBOX_CODE)
        with pytest.raises(NotFound):
            await access.consume_invite(ctx, container.hasher, root, SANDBOX_CODE, PASSWORD)
        assert (await _stored(ctx, alice.root.id)).password_hash is None


# KYC of an authorised user


async def test_a_corporates_user_starts_kyc_once_its_email_is_verified_and_the_kyb_approved(
    container: Container,
) -> None:
    async with rolled_back(container) as db:
        ctx = await make.new_programme(db, container)
        alice = await make.customer(ctx, verified=False)
        mary = await make.authorised_user(ctx, alice)
        auth = await access.open_user_session(ctx, mary)
        await _refused("EMAIL_NOT_VERIFIED", users.start_kyc(ctx, auth))
        await users.send_email_code(ctx, mary.email)
        await identities.verify_email(ctx, mary.email, SANDBOX_CODE, None)
        await _refused("KYB_IDENTITY_NOT_APPROVED", users.start_kyc(ctx, auth))
        assert (await _stored(ctx, mary.id)).kyc_status == "NOT_STARTED"
        await identities.simulate_verify(ctx, alice.identity.id, CORPORATE)
        reference = await users.start_kyc(ctx, auth)
        stored = await _stored(ctx, mary.id)
        assert (stored.kyc_status, stored.kyc_reference) == ("INITIATED", reference)
        # Starting again resumes it.
        assert await users.start_kyc(ctx, auth) == reference
