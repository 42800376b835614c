"""Business rules for corporates and consumers and their root users. Flushes, never commits."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from multibank.identities import events
from multibank.identities import repository as repo
from multibank.identities.models import CONSUMER, CORPORATE, Identity
from multibank.identities.schemas import (
    ConsumerCreate,
    CorporateCreate,
)
from multibank.kernel import codes, notify
from multibank.kernel.errors import Conflict, NotFound
from multibank.kernel.ids import new_id
from multibank.kernel.validation import is_country, is_mobile_country_code, parse_id
from multibank.kernel.vocabulary import KyiStatus
from multibank.kyc import provider
from multibank.programmes import repository as programmes
from multibank.programmes.context import Ctx
from multibank.programmes.service import fee_groups
from multibank.users import repository as users
from multibank.users.models import ROOT, User

EMAIL_VERIFY = "EMAIL_VERIFY"
MOBILE_VERIFY = "MOBILE_VERIFY"
MOBILE_RESEND_MS = 15_000
MOBILE_TRIES = 5


def _dump(model: BaseModel | None) -> dict[str, Any] | None:
    return None if model is None else model.model_dump(exclude_none=True, mode="json")


async def _check_profile(ctx: Ctx, profile_id: str, kind: str) -> int:
    pid = parse_id(profile_id)
    profile = None if pid is None else await programmes.get_profile(ctx.db, ctx.programme.id, pid)
    if profile is None or profile.kind != kind:
        # A profile of another kind is not found either, for both kinds (D11a, as observed).
        raise Conflict("PROFILE_NOT_FOUND")
    if not profile.active:
        raise Conflict("PROFILE_INACTIVE")
    return profile.id


async def _currencies(ctx: Ctx, profile_id: int) -> list[str]:
    profile = await programmes.get_profile(ctx.db, ctx.programme.id, profile_id)
    return list(profile.currencies) if profile else []


async def _check_fee_group(ctx: Ctx, group: str | None) -> str:
    group = group or "DEFAULT"
    if group not in await fee_groups(ctx.db, ctx.programme.id):
        raise Conflict("FEE_GROUP_INVALID")
    return group


def _check_mobile(country_code: str) -> None:
    if not is_mobile_country_code(country_code):
        raise Conflict("MOBILE_OR_COUNTRY_CODE_INVALID")


def _check_countries(*codes_: str | None) -> None:
    for code in codes_:
        if code is not None and not is_country(code):
            raise Conflict("COUNTRY_INVALID")


def _new_root(ctx: Ctx, identity: Identity, **fields: Any) -> User:
    return User(
        id=new_id(),
        programme_id=ctx.programme.id,
        identity_id=identity.id,
        identity_type=identity.type,
        role=ROOT,
        email_key=users.email_key(fields["email"]),
        active=True,
        email_verified=False,
        mobile_verified=False,
        password_history=[],
        password_expires_at=0,
        failed_logins=0,
        invite_state="NONE",
        kyc_status="NOT_STARTED",
        created_at=ctx.now,
        **fields,
    )


async def _add_identity(
    ctx: Ctx,
    kind: str,
    profile_id: int,
    data: CorporateCreate | ConsumerCreate,
    fee_group: str,
    **extra: Any,
) -> Identity:
    """The identity row both sign-ups share; `extra` holds the corporate-only columns."""
    identity = Identity(
        id=new_id(),
        programme_id=ctx.programme.id,
        type=kind,
        profile_id=profile_id,
        tag=data.tag,
        ip_address=data.ipAddress,
        accepted_terms=True,
        base_currency=data.baseCurrency,
        fee_group=fee_group,
        source_of_funds=data.sourceOfFunds,
        source_of_funds_other=data.sourceOfFundsOther,
        dd_status=KyiStatus.NOT_STARTED,
        dd_ongoing_status=KyiStatus.NOT_STARTED,
        dd_permanently_rejected=False,
        created_at=ctx.now,
        **extra,
    )
    ctx.db.add(identity)
    await ctx.db.flush()
    return identity


async def create_corporate(ctx: Ctx, data: CorporateCreate) -> tuple[Identity, User]:
    profile_id = await _check_profile(ctx, data.profileId, "corporate")
    if not data.acceptedTerms:
        raise Conflict("TERMS_NOT_ACCEPTED")
    if data.baseCurrency not in await _currencies(ctx, profile_id):
        raise Conflict("CURRENCY_UNSUPPORTED")
    fee_group = await _check_fee_group(ctx, data.feeGroup)
    company = data.company
    _check_countries(
        company.registrationCountry,
        company.businessAddress.country if company.businessAddress else None,
    )
    _check_mobile(data.rootUser.mobile.countryCode)
    if await users.email_taken(ctx.db, ctx.programme.id, data.rootUser.email):
        raise Conflict("ROOT_EMAIL_NOT_UNIQUE")
    identity = await _add_identity(
        ctx,
        CORPORATE,
        profile_id,
        data,
        fee_group,
        industry=data.industry,
        company={
            "name": company.name,
            "type": company.type.value,
            "registrationNumber": company.registrationNumber,
            "businessAddress": _dump(company.businessAddress),
            "countryOfRegistration": company.registrationCountry,
            "incorporatedOn": _dump(company.incorporatedOn),
        },
    )
    root = _new_root(
        ctx,
        identity,
        name=data.rootUser.name,
        surname=data.rootUser.surname,
        email=str(data.rootUser.email),
        mobile_country_code=data.rootUser.mobile.countryCode,
        mobile_number=data.rootUser.mobile.number,
        date_of_birth=_dump(data.rootUser.dateOfBirth),
        company_position=data.rootUser.companyPosition.value,
    )
    ctx.db.add(root)
    await ctx.db.flush()
    return identity, root


async def create_consumer(ctx: Ctx, data: ConsumerCreate) -> tuple[Identity, User]:
    profile_id = await _check_profile(ctx, data.profileId, "consumer")
    if not data.acceptedTerms:
        raise Conflict("TERMS_NOT_ACCEPTED")
    if data.baseCurrency is not None and data.baseCurrency not in await _currencies(
        ctx, profile_id
    ):
        raise Conflict("CURRENCY_UNSUPPORTED")
    fee_group = await _check_fee_group(ctx, data.feeGroup)
    ru = data.rootUser
    _check_countries(ru.nationality, ru.address.country if ru.address else None)
    _check_mobile(ru.mobile.countryCode)
    if await users.email_taken(ctx.db, ctx.programme.id, ru.email):
        raise Conflict("ROOT_EMAIL_NOT_UNIQUE")
    identity = await _add_identity(ctx, CONSUMER, profile_id, data, fee_group)
    root = _new_root(
        ctx,
        identity,
        name=ru.name,
        surname=ru.surname,
        email=str(ru.email),
        mobile_country_code=ru.mobile.countryCode,
        mobile_number=ru.mobile.number,
        date_of_birth=_dump(ru.dateOfBirth),
        occupation=ru.occupation,
        address=_dump(ru.address),
        nationality=ru.nationality,
        place_of_birth=ru.placeOfBirth,
    )
    ctx.db.add(root)
    await ctx.db.flush()
    return identity, root


async def view(ctx: Ctx, identity_id: int, kind: str) -> tuple[repo.IdentityView, repo.RootView]:
    """The identity with its root user as a read answers them, in one statement."""
    found = await repo.view_with_root(ctx.db, ctx.programme.id, identity_id, kind)
    if found is None:
        raise NotFound("Identity not found")
    return found


async def load(ctx: Ctx, identity_id: int, kind: str) -> tuple[Identity, User]:
    """The identity with its root user, in one statement."""
    found = await repo.with_root(ctx.db, ctx.programme.id, identity_id, kind)
    if found is None:
        raise NotFound("Identity not found")
    return found


async def _update_root_contact(
    ctx: Ctx, identity: Identity, root: User, data: BaseModel, locked_code: str
) -> None:
    """The root user's personal fields; once due diligence is approved they are locked."""
    sent = data.model_fields_set
    new: dict[str, Any] = {}
    for wire, column in (("name", "name"), ("surname", "surname"), ("email", "email")):
        value = getattr(data, wire, None)
        if wire in sent and value is not None and str(value) != getattr(root, column):
            new[column] = str(value)
    mobile = getattr(data, "mobile", None)
    if (
        "mobile" in sent
        and mobile is not None
        and (mobile.countryCode != root.mobile_country_code or mobile.number != root.mobile_number)
    ):
        _check_mobile(mobile.countryCode)
        new["mobile_country_code"] = mobile.countryCode
        new["mobile_number"] = mobile.number
    dob = getattr(data, "dateOfBirth", None)
    if "dateOfBirth" in sent and dob is not None and _dump(dob) != root.date_of_birth:
        new["date_of_birth"] = _dump(dob)
    address = getattr(data, "address", None)
    if "address" in sent and address is not None and _dump(address) != root.address:
        _check_countries(address.country)
        new["address"] = _dump(address)
    # Interface: after approval a corporate's root user keeps name, surname, e-mail and mobile;
    # a consumer also keeps date of birth and address.
    locked = {"name", "surname", "email", "mobile_country_code", "mobile_number"}
    if identity.type == CONSUMER:
        locked |= {"date_of_birth", "address"}
    if locked & set(new) and identity.dd_status == KyiStatus.APPROVED:
        raise Conflict(locked_code)
    if "email" in new:
        if await users.email_taken(ctx.db, ctx.programme.id, new["email"], root.id):
            raise Conflict("EMAIL_NOT_UNIQUE")
        if users.email_key(new["email"]) != root.email_key:
            # A code sent to the old address must not prove the new one.
            root.email_verified = False
            await codes.revoke(ctx.db, ctx.programme.id, f"user:{root.id}", EMAIL_VERIFY, ctx.now)
        root.email_key = users.email_key(new["email"])
    if "mobile_number" in new:
        root.mobile_verified = False
        await codes.revoke(ctx.db, ctx.programme.id, f"user:{root.id}", MOBILE_VERIFY, ctx.now)
    for column, value in new.items():
        setattr(root, column, value)


async def _update_common(ctx: Ctx, identity: Identity, data: BaseModel) -> None:
    sent = data.model_fields_set
    if "tag" in sent:
        identity.tag = getattr(data, "tag", None)
    if "feeGroup" in sent and getattr(data, "feeGroup", None) is not None:
        identity.fee_group = await _check_fee_group(ctx, data.feeGroup)  # type: ignore[attr-defined]
    currency = getattr(data, "baseCurrency", None)
    if "baseCurrency" in sent and currency is not None:
        if currency not in await _currencies(ctx, identity.profile_id):
            raise Conflict("CURRENCY_UNSUPPORTED")
        identity.base_currency = currency
    for wire, column in (
        ("industry", "industry"),
        ("sourceOfFunds", "source_of_funds"),
        ("sourceOfFundsOther", "source_of_funds_other"),
    ):
        if wire in sent and getattr(data, wire, None) is not None:
            setattr(identity, column, getattr(data, wire))


async def update_corporate(ctx: Ctx, identity_id: int, data: BaseModel) -> None:
    """`data` is either version's update body; only the fields sent change."""
    identity, root = await load(ctx, identity_id, CORPORATE)
    await _update_root_contact(ctx, identity, root, data, "ROOT_USER_ALREADY_VERIFIED")
    await _update_common(ctx, identity, data)
    company = dict(identity.company or {})
    business_address = getattr(data, "companyBusinessAddress", None)
    if business_address is not None:
        _check_countries(business_address.country)
        company["businessAddress"] = _dump(business_address)
    company_type = getattr(data, "companyType", None)
    if company_type is not None:
        company["type"] = str(company_type)
    identity.company = company
    await ctx.db.flush()


async def update_consumer(ctx: Ctx, identity_id: int, data: BaseModel) -> None:
    """`data` is either version's update body; only the fields sent change."""
    identity, root = await load(ctx, identity_id, CONSUMER)
    await _update_root_contact(ctx, identity, root, data, "CONSUMER_VERIFIED")
    await _update_common(ctx, identity, data)
    sent = data.model_fields_set
    occupation = getattr(data, "occupation", None)
    if "occupation" in sent and occupation is not None:
        root.occupation = str(occupation)
    place = getattr(data, "placeOfBirth", None)
    if "placeOfBirth" in sent and place is not None:
        root.place_of_birth = place
    nationality = getattr(data, "nationality", None)
    if "nationality" in sent and nationality is not None:
        _check_countries(nationality)
        root.nationality = nationality
    await ctx.db.flush()


# Root-user e-mail and mobile verification


async def _root_by_email(ctx: Ctx, email: str, kind: str) -> User | None:
    user = await users.by_email(ctx.db, ctx.programme.id, email)
    if user is None or user.role != ROOT or user.identity_type != kind:
        return None
    return user


async def send_email_code(ctx: Ctx, email: str, kind: str) -> None:
    user = await _root_by_email(ctx, email, kind)
    if user is None:
        raise Conflict("EMAIL_NOT_FOUND")
    await send_user_email_code(ctx, user)


async def send_user_email_code(ctx: Ctx, user: User) -> None:
    issued = await ctx.issue_code(f"user:{user.id}", EMAIL_VERIFY)
    await notify.record(
        ctx.db,
        programme_id=ctx.programme.id,
        sandbox=ctx.sandbox,
        channel="EMAIL",
        recipient=user.email,
        subject="Verify your e-mail address",
        body=f"Your verification code is {issued.code}. It expires in 10 minutes.",
        now_ms=ctx.now,
    )


async def verify_email(ctx: Ctx, email: str, code: str, kind: str | None) -> None:
    user = await users.by_email(ctx.db, ctx.programme.id, email)
    if user is None or (kind is not None and (user.role != ROOT or user.identity_type != kind)):
        raise Conflict("VERIFICATION_CODE_INVALID")
    if kind is None and user.role == ROOT:
        raise Conflict("VERIFICATION_CODE_INVALID")
    await verify_user_email(ctx, user, code)


async def verify_user_email(ctx: Ctx, user: User, code: str) -> None:
    await ctx.check_code(f"user:{user.id}", EMAIL_VERIFY, code, "VERIFICATION_CODE_INVALID")
    user.email_verified = True
    await ctx.db.flush()


async def send_mobile_code(ctx: Ctx, identity_id: int, kind: str) -> tuple[int, int]:
    """3.1.0 root-user mobile verification: (timeLeftForRetry seconds, retriesLeft)."""
    _, root = await load(ctx, identity_id, kind)
    if root.mobile_verified:
        raise Conflict("ALREADY_VERIFIED")
    subject = f"user:{root.id}"
    last = await codes.latest(ctx.db, ctx.programme.id, subject, MOBILE_VERIFY)
    if last is not None and ctx.now - last.created_at < MOBILE_RESEND_MS:
        raise Conflict("FREQUENCY_EXCEEDED")
    issued = await ctx.issue_code(subject, MOBILE_VERIFY)
    await notify.record(
        ctx.db,
        programme_id=ctx.programme.id,
        sandbox=ctx.sandbox,
        channel="SMS",
        recipient=f"{root.mobile_country_code}{root.mobile_number}",
        subject="Mobile verification",
        body=f"Your verification code is {issued.code}.",
        now_ms=ctx.now,
    )
    return MOBILE_RESEND_MS // 1000, MOBILE_TRIES


async def verify_mobile(ctx: Ctx, identity_id: int, kind: str, code: str) -> None:
    _, root = await load(ctx, identity_id, kind)
    if root.mobile_verified:
        raise Conflict("VERIFICATION_CODE_INVALID")
    await ctx.check_code(f"user:{root.id}", MOBILE_VERIFY, code, "VERIFICATION_CODE_INVALID")
    root.mobile_verified = True
    await ctx.db.flush()


# Due diligence


async def start_due_diligence(ctx: Ctx, identity_id: int, kind: str, level: str | None) -> str:
    """KYB (corporates) or KYC (consumers): answers the provider reference, status INITIATED."""
    identity, root = await load(ctx, identity_id, kind)
    prefix = "KYB" if kind == CORPORATE else "KYC"
    if identity.dd_status == KyiStatus.APPROVED:
        raise Conflict(f"{prefix}_ALREADY_APPROVED")
    if identity.dd_status == KyiStatus.PENDING_REVIEW:
        raise Conflict(f"{prefix}_PENDING_REVIEW")
    if identity.dd_status == KyiStatus.REJECTED and identity.dd_permanently_rejected:
        raise Conflict("KYB_PERMANENTLY_REJECTED" if kind == CORPORATE else "KYC_REJECTED")
    if not root.email_verified:
        raise Conflict("EMAIL_UNVERIFIED")
    resumable = identity.dd_status == KyiStatus.INITIATED and identity.dd_reference
    if resumable and (level is None or level == identity.dd_level):
        return str(identity.dd_reference)  # the client resumes the session it already opened
    identity.dd_reference = provider.new_reference()
    identity.dd_status = KyiStatus.INITIATED
    if kind == CONSUMER:
        identity.dd_level = level or "KYC_LEVEL_2"
    await ctx.db.flush()
    return identity.dd_reference


async def decide(ctx: Ctx, identity: Identity, outcome: str, permanent: bool = False) -> None:
    """The provider's verdict (sandbox page or simulator): PENDING_REVIEW, APPROVED or REJECTED;
    the programme's webhook hears of it (KYB or KYC event)."""
    identity.dd_status = outcome
    identity.dd_permanently_rejected = outcome == KyiStatus.REJECTED and permanent
    if outcome == KyiStatus.APPROVED and identity.type == CONSUMER and identity.dd_level is None:
        identity.dd_level = "KYC_LEVEL_2"
    root = await users.root_of(ctx.db, ctx.programme.id, identity.id)
    await events.due_diligence(ctx, identity, root.email)


async def simulate_verify(ctx: Ctx, identity_id: int, kind: str) -> None:
    """Simulator `verify`: e-mail and mobile verified and due diligence approved at once."""
    identity, root = await load(ctx, identity_id, kind)
    root.email_verified = True
    root.mobile_verified = True
    await decide(ctx, identity, KyiStatus.APPROVED)
    await ctx.db.flush()


async def simulate_reject(ctx: Ctx, identity_id: int, kind: str, permanent: bool) -> None:
    identity, _ = await load(ctx, identity_id, kind)
    await decide(ctx, identity, KyiStatus.REJECTED, permanent)
    await ctx.db.flush()


def holder_name(company: dict[str, Any] | None, name: str, surname: str) -> str:
    """How an identity is named to others (an IBAN's beneficiary, a payment's other side): a
    corporate by its company's name, a consumer by its root user's name and surname."""
    if company:
        return str(company.get("name", ""))
    return f"{name} {surname}"


async def holder_names(ctx: Ctx, ids: list[int]) -> dict[int, tuple[str, str]]:
    """(type, name) of each of the programme's identities in `ids`."""
    found = await repo.holders(ctx.db, ctx.programme.id, ids)
    return {i: (kind, holder_name(company, n, s)) for i, (kind, company, n, s) in found.items()}


def is_verified(identity: Identity) -> bool:
    """Due diligence approved: instruments may be created (managed accounts, next issues)."""
    return identity.dd_status == KyiStatus.APPROVED
