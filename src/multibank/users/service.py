"""Authorised users: created by any user of the identity, invited to set a password.
Flushes, never commits."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel

from multibank.identities import repository as identities_repo
from multibank.identities import service as identities
from multibank.kernel import codes, notify
from multibank.kernel.errors import Conflict, NotFound
from multibank.kernel.ids import new_id
from multibank.kernel.tokens import AuthSession, end_user_sessions
from multibank.kernel.validation import is_mobile_country_code, parse_id
from multibank.kyc import provider
from multibank.programmes.context import Ctx
from multibank.users import repository as repo
from multibank.users.models import USER, User
from multibank.users.schemas import UserBase

INVITE = "INVITE"
INVITE_TTL_MS = 30 * 86_400_000  # "valid for one month"
MAX_PAGE = 100


def _dump(model: BaseModel | None) -> dict[str, int] | None:
    return None if model is None else model.model_dump(mode="json")


async def _check_mobile(
    ctx: Ctx, identity_id: int, country_code: str, number: str, except_user: int | None = None
) -> None:
    if not is_mobile_country_code(country_code):
        raise Conflict("MOBILE_OR_COUNTRY_CODE_INVALID")
    if await repo.mobile_taken(
        ctx.db, ctx.programme.id, identity_id, country_code, number, except_user
    ):
        raise Conflict("MOBILE_NOT_UNIQUE")


async def create(ctx: Ctx, caller: AuthSession, data: UserBase) -> User:
    """`data` may be 3.1.0's shape, which has no mobile or date of birth."""
    mobile = getattr(data, "mobile", None)
    dob = getattr(data, "dateOfBirth", None)
    if await repo.email_taken(ctx.db, ctx.programme.id, data.email):
        raise Conflict("EMAIL_NOT_UNIQUE")
    if mobile is not None:
        await _check_mobile(ctx, caller.identity_id, mobile.countryCode, mobile.number)
    user = User(
        id=new_id(),
        programme_id=ctx.programme.id,
        identity_id=caller.identity_id,
        identity_type=caller.identity_type,
        role=USER,
        name=data.name,
        surname=data.surname,
        email=str(data.email),
        email_key=repo.email_key(data.email),
        mobile_country_code=mobile.countryCode if mobile else None,
        mobile_number=mobile.number if mobile else None,
        date_of_birth=_dump(dob),
        active=True,
        email_verified=False,
        mobile_verified=False,
        password_history=[],
        password_expires_at=0,
        failed_logins=0,
        invite_state="NONE",
        kyc_status="NOT_STARTED",
        created_at=ctx.now,
    )
    ctx.db.add(user)
    await ctx.db.flush()
    return user


async def get(ctx: Ctx, caller: AuthSession, user_id: str) -> User:
    """An authorised user of the caller's identity; anything else is 404 (D7)."""
    uid = parse_id(user_id)
    user = (
        None
        if uid is None
        else await repo.authorised_user(ctx.db, ctx.programme.id, caller.identity_id, uid)
    )
    if user is None:
        raise NotFound("User not found")
    return user


async def page(
    ctx: Ctx,
    caller: AuthSession,
    offset: int,
    limit: int | None,
    active: bool | None,
    email: str | None,
) -> tuple[int, Sequence[User]]:
    return await repo.list_authorised(
        ctx.db,
        ctx.programme.id,
        caller.identity_id,
        offset=offset,
        limit=min(limit or MAX_PAGE, MAX_PAGE),
        active=active,
        email=email,
    )


async def update(ctx: Ctx, caller: AuthSession, user_id: str, data: BaseModel) -> User:
    user = await get(ctx, caller, user_id)
    sent = data.model_fields_set
    email = getattr(data, "email", None)
    if "email" in sent and email is not None and str(email) != user.email:
        if await repo.email_taken(ctx.db, ctx.programme.id, email, user.id):
            raise Conflict("EMAIL_NOT_UNIQUE")
        if repo.email_key(email) != user.email_key:
            user.email_verified = False
            await codes.revoke(
                ctx.db, ctx.programme.id, f"user:{user.id}", identities.EMAIL_VERIFY, ctx.now
            )
        user.email = str(email)
        user.email_key = repo.email_key(email)
    mobile = getattr(data, "mobile", None)
    if "mobile" in sent and mobile is not None:
        await _check_mobile(ctx, user.identity_id, mobile.countryCode, mobile.number, user.id)
        if (mobile.countryCode, mobile.number) != (user.mobile_country_code, user.mobile_number):
            user.mobile_verified = False
        user.mobile_country_code = mobile.countryCode
        user.mobile_number = mobile.number
    for wire in ("name", "surname"):
        value = getattr(data, wire, None)
        if wire in sent and value is not None:
            setattr(user, wire, value)
    dob = getattr(data, "dateOfBirth", None)
    if "dateOfBirth" in sent and dob is not None:
        user.date_of_birth = _dump(dob)
    await ctx.db.flush()
    return user


async def set_active(ctx: Ctx, caller: AuthSession, user_id: str, active: bool) -> None:
    """Deactivation ends the user's sessions; only another (active, logged-in) user of the
    identity can activate a user again, which a deactivated user cannot be."""
    user = await get(ctx, caller, user_id)
    user.active = active
    if active:
        user.failed_logins = 0
    else:
        await end_user_sessions(ctx.db, ctx.programme.id, user.id, ctx.now)
    await ctx.db.flush()


async def send_invite(ctx: Ctx, caller: AuthSession, user_id: str) -> None:
    user = await get(ctx, caller, user_id)
    if user.invite_state == "CONSUMED":
        raise Conflict("INVITE_ALREADY_CONSUMED")
    issued = await ctx.issue_code(f"user:{user.id}", INVITE, INVITE_TTL_MS)
    user.invite_state = "SENT"
    await notify.record(
        ctx.db,
        programme_id=ctx.programme.id,
        sandbox=ctx.sandbox,
        channel="EMAIL",
        recipient=user.email,
        subject="You are invited",
        body=f"Set your password with user id {user.id} and invite code {issued.code}.",
        now_ms=ctx.now,
    )
    await ctx.db.flush()


async def invitee(ctx: Ctx, user_id: str) -> User:
    """The authorised user `user_id` names (404 for a root user or one of another programme)."""
    uid = parse_id(user_id)
    user = None if uid is None else await repo.get(ctx.db, ctx.programme.id, uid)
    if user is None or user.role != USER:
        raise NotFound("User not found")
    return user


async def check_invite(ctx: Ctx, user: User, code: str, keep: bool) -> None:
    """409 unless `user`'s invite is out and `code` is its code; not `keep`: the code is used up."""
    if user.invite_state != "SENT":
        raise Conflict("INVITE_OR_INVITE_CODE_INVALID")
    await ctx.check_code(
        f"user:{user.id}", INVITE, code, "INVITE_OR_INVITE_CODE_INVALID", keep=keep
    )


async def invite_consumed(ctx: Ctx, user: User) -> None:
    """The invite is used: its e-mail proved the address. (Setting the first password and
    logging in are the access slice's, `access.service.consume_invite`.)"""
    user.invite_state = "CONSUMED"
    user.email_verified = True
    await ctx.db.flush()


async def validate_invite(ctx: Ctx, user_id: str, code: str) -> None:
    await check_invite(ctx, await invitee(ctx, user_id), code, keep=True)


async def send_email_code(ctx: Ctx, email: str) -> None:
    user = await repo.by_email(ctx.db, ctx.programme.id, email)
    if user is None or user.role != USER:
        raise Conflict("EMAIL_NOT_FOUND")
    await identities.send_user_email_code(ctx, user)


async def start_kyc(ctx: Ctx, caller: AuthSession) -> str:
    """KYC of the logged-in user (3.29.1 `POST /users/kyc`); a corporate's users need its KYB."""
    user = await repo.get(ctx.db, ctx.programme.id, caller.user_id)
    if user is None:  # pragma: no cover - a live session always names an existing user
        raise NotFound("User not found")
    if not user.email_verified:
        raise Conflict("EMAIL_NOT_VERIFIED")
    identity = await identities_repo.get(ctx.db, ctx.programme.id, user.identity_id)
    if (
        identity is not None
        and identity.type == "CORPORATE"
        and not identities.is_verified(identity)
    ):
        raise Conflict("KYB_IDENTITY_NOT_APPROVED")
    if user.kyc_status == "APPROVED":
        raise Conflict("KYC_ALREADY_APPROVED")
    if user.kyc_status == "PENDING_REVIEW":
        raise Conflict("KYC_PENDING_REVIEW")
    if user.kyc_status == "REJECTED":
        raise Conflict("KYC_REJECTED")
    if user.kyc_status == "INITIATED" and user.kyc_reference:
        return user.kyc_reference
    user.kyc_reference = provider.new_reference()
    user.kyc_status = "INITIATED"
    await ctx.db.flush()
    return user.kyc_reference
