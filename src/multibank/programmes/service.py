"""Operator rules for programmes; the CLI and the portal API both call these. Never commits."""

from __future__ import annotations

import hashlib
import secrets

from sqlalchemy import update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from multibank.kernel.clock import Clock
from multibank.kernel.destinations import refused_destination
from multibank.kernel.errors import Conflict, NotFound
from multibank.kernel.ids import new_id
from multibank.programmes import repository as repo
from multibank.programmes.card_fees import card_fees, with_fee
from multibank.programmes.models import (
    DEFAULT_MOVEMENT_FEES,
    LINKED_ACCOUNT_CURRENCIES,
    LINKED_ACCOUNTS_KIND,
    MOVEMENT_KINDS,
    PROFILE_KINDS,
    ApiKey,
    FeeType,
    Profile,
    Programme,
)
from multibank.programmes.schemas import (
    ApiKeyCreated,
    ApiKeyRead,
    CardFeesRead,
    FeeTypeCreate,
    FeeTypeRead,
    FeeTypeWrite,
    MovementFeesRead,
    ProfileCreate,
    ProfileRead,
    ProfileUpdate,
    ProgrammeCreate,
    ProgrammeDescription,
    ProgrammeProfiles,
    ProgrammeRead,
    ProgrammeSettings,
    ProgrammeSettingsUpdate,
)

DEFAULT_FEE_TYPES: dict[str, dict[str, int]] = {"DEFAULT": {}, "PREMIUM": {}}
_DEFAULT_FEE = {"DEFAULT": 100, "PREMIUM": 50}


def hash_api_key(plaintext: str) -> str:
    # API keys carry 256 random bits, so a fast hash is enough to make a stolen table useless.
    return hashlib.sha256(plaintext.encode()).hexdigest()


def _new_key(mode: str) -> str:
    return f"mb_{'sbx' if mode == 'sandbox' else 'live'}_{secrets.token_urlsafe(32)}"


async def create_programme(
    session: AsyncSession, clock: Clock, data: ProgrammeCreate, allow_private: bool = False
) -> tuple[Programme, str]:
    if await repo.get_programme_by_name(session, data.name) is not None:
        raise Conflict("PROGRAMME_NAME_NOT_UNIQUE")
    await check_webhook_url(data.mode, data.webhookUrl, allow_private)
    now = clock.system_ms()
    programme = Programme(
        id=new_id(),
        name=data.name,
        mode=data.mode,
        **{column: getattr(data, wire) for wire, column in SETTING_COLUMNS.items()},
        clock_offset_ms=0,
        created_at=now,
    )
    try:
        async with session.begin_nested():
            session.add(programme)
            await session.flush()
    except IntegrityError:  # another request took the name between the check and the insert
        raise Conflict("PROGRAMME_NAME_NOT_UNIQUE") from None
    for kind in PROFILE_KINDS:
        movement = kind in MOVEMENT_KINDS
        session.add(
            Profile(
                id=new_id(),
                programme_id=programme.id,
                kind=kind,
                currencies=_profile_currencies(kind, list(data.currencies)),
                active=True,
                fees={c: DEFAULT_MOVEMENT_FEES[kind] for c in data.currencies}
                if movement
                else None,
                created_at=now,
            )
        )
    session.add(
        FeeType(
            id=new_id(),
            programme_id=programme.id,
            name="ADMIN_FEE",
            amounts={g: {c: amt for c in data.currencies} for g, amt in _DEFAULT_FEE.items()},
            created_at=now,
        )
    )
    _, key = await _add_key(session, clock, programme, label="initial")
    await session.flush()
    return programme, key


def _profile_currencies(kind: str, currencies: list[str]) -> list[str]:
    """A new profile's currencies: the programme's; a linked-account profile's, those of them
    a linked account may be in (D39)."""
    if kind == LINKED_ACCOUNTS_KIND:
        return [c for c in currencies if c in LINKED_ACCOUNT_CURRENCIES]
    return currencies


async def _add_key(
    session: AsyncSession, clock: Clock, programme: Programme, label: str | None
) -> tuple[ApiKey, str]:
    plaintext = _new_key(programme.mode)
    row = ApiKey(
        id=new_id(),
        programme_id=programme.id,
        key_hash=hash_api_key(plaintext),
        prefix=plaintext[:10],
        sandbox_plaintext=plaintext if programme.mode == "sandbox" else None,
        label=label,
        created_at=clock.system_ms(),
    )
    session.add(row)
    await session.flush()
    return row, plaintext


async def require_programme(session: AsyncSession, programme_id: int) -> Programme:
    programme = await repo.get_programme(session, programme_id)
    if programme is None:
        raise NotFound("Programme not found")
    return programme


async def require_programme_by_name(session: AsyncSession, name: str) -> Programme:
    programme = await repo.get_programme_by_name(session, name)
    if programme is None:
        raise NotFound(f"Programme {name!r} not found")
    return programme


def movement_fees_of(profile: Profile) -> dict[str, int]:
    """A movement profile's fee in each of its currencies (0 where none is set)."""
    fees = profile.fees or {}
    return {c: int(fees.get(c, 0)) for c in sorted(profile.currencies)}


async def _profiles_and_fees(
    session: AsyncSession, programme: Programme
) -> tuple[ProgrammeProfiles, list[str], dict[str, dict[str, dict[str, int]]], MovementFeesRead]:
    profiles = await repo.list_profiles(session, programme.id)
    # The first profile of each kind is the one the D4 summary names.
    first: dict[str, Profile] = {}
    currencies: set[str] = set()
    for p in profiles:
        first.setdefault(p.kind, p)
        currencies.update(p.currencies)
    fees = {f.name: f.amounts for f in await repo.list_fee_types(session, programme.id)}
    movement = MovementFeesRead(**{k: movement_fees_of(first[k]) for k in MOVEMENT_KINDS})
    named = ProgrammeProfiles(**{kind: str(p.id) for kind, p in first.items()})
    return named, sorted(currencies), fees, movement


async def describe(
    session: AsyncSession, programme: Programme, api_key: str | None = None
) -> ProgrammeDescription:
    """The D4 summary. A sandbox programme's first live key is shown again; a live one's never."""
    profiles, currencies, fees, movement = await _profiles_and_fees(session, programme)
    if api_key is None:
        for key in await repo.list_api_keys(session, programme.id):
            if key.revoked_at is None and key.sandbox_plaintext:
                api_key = key.sandbox_plaintext
                break
    return ProgrammeDescription(
        programmeId=str(programme.id),
        apiKey=api_key,
        profiles=profiles,
        currencies=currencies,
        feeTypes=fees,
        movementFees=movement,
        cardFees=CardFeesRead(**card_fees(programme, currencies)),
    )


async def read(session: AsyncSession, programme: Programme) -> ProgrammeRead:
    profiles, currencies, fees, movement = await _profiles_and_fees(session, programme)
    return ProgrammeRead(
        programmeId=str(programme.id),
        name=programme.name,
        mode=programme.mode,
        settings=settings_of(programme),
        profiles=profiles,
        currencies=currencies,
        feeTypes=fees,
        movementFees=movement,
        cardFees=CardFeesRead(**card_fees(programme, currencies)),
        creationTimestamp=programme.created_at,
    )


# Each setting's wire name and the programme column that keeps it.
SETTING_COLUMNS = {
    "stepUpRequired": "step_up_required",
    "failedLoginLimit": "failed_login_limit",
    "ibanAllocationDelaySeconds": "iban_allocation_delay_seconds",
    "passwordExpiryDays": "password_expiry_days",
    "sendsScaRequired": "sends_sca_required",
    "owtScaRequired": "owt_sca_required",
    "scaChallengeLimit": "sca_challenge_limit",
    "lowValueExemptionMaxAmount": "low_value_max_amount",
    "lowValueExemptionMaxCount": "low_value_max_count",
    "lowValueExemptionMaxTotal": "low_value_max_total",
    "owtProcessingDelaySeconds": "owt_processing_delay_seconds",
    "webhookUrl": "webhook_url",
}
NULLABLE_SETTINGS = ("passwordExpiryDays", "webhookUrl")


async def check_webhook_url(mode: str, url: str | None, allow_private: bool) -> None:
    """A live programme's events may not go to loopback, link-local or private addresses
    (server-side request forgery, D16) unless the server allows it."""
    if url is None or mode == "sandbox" or allow_private:
        return
    why = await refused_destination(url)
    if why is not None:
        raise Conflict("WEBHOOK_URL_NOT_ALLOWED", why)


def settings_of(programme: Programme) -> ProgrammeSettings:
    return ProgrammeSettings(
        **{wire: getattr(programme, column) for wire, column in SETTING_COLUMNS.items()}
    )


async def update_settings(
    session: AsyncSession,
    programme: Programme,
    data: ProgrammeSettingsUpdate,
    allow_private: bool = False,
) -> ProgrammeSettings:
    if "webhookUrl" in data.model_fields_set:
        await check_webhook_url(programme.mode, data.webhookUrl, allow_private)
    for wire, column in SETTING_COLUMNS.items():
        if wire in data.model_fields_set:
            value = getattr(data, wire)
            if value is None and wire not in NULLABLE_SETTINGS:
                continue
            setattr(programme, column, value)
    await session.flush()
    return settings_of(programme)


# API keys


def _key_read(key: ApiKey) -> ApiKeyRead:
    return ApiKeyRead(
        id=str(key.id),
        prefix=key.prefix,
        label=key.label,
        creationTimestamp=key.created_at,
        revokedTimestamp=key.revoked_at,
    )


async def create_api_key(
    session: AsyncSession, clock: Clock, programme: Programme, label: str | None
) -> ApiKeyCreated:
    key, plaintext = await _add_key(session, clock, programme, label)
    return ApiKeyCreated(**_key_read(key).model_dump(), apiKey=plaintext)


async def list_api_keys(session: AsyncSession, programme: Programme) -> list[ApiKeyRead]:
    return [_key_read(k) for k in await repo.list_api_keys(session, programme.id)]


async def revoke_api_key(
    session: AsyncSession, clock: Clock, programme: Programme, key_id: int
) -> ApiKeyRead:
    key = await repo.get_api_key(session, programme.id, key_id)
    if key is None:
        raise NotFound("API key not found")
    if key.revoked_at is None:
        key.revoked_at = clock.system_ms()
        key.sandbox_plaintext = None
        await session.flush()
    return _key_read(key)


async def programme_for_api_key(session: AsyncSession, plaintext: str) -> Programme | None:
    return await repo.programme_for_key_hash(session, hash_api_key(plaintext))


# Profiles


def profile_read(p: Profile) -> ProfileRead:
    return ProfileRead(
        id=str(p.id),
        kind=p.kind,
        currencies=list(p.currencies),
        active=p.active,
        fees=movement_fees_of(p) if p.kind in MOVEMENT_KINDS else None,
        returnFeeRefunded=p.return_fee_refunded if p.kind == "outgoingWireTransfers" else None,
        spendRules=dict(p.spend_rules or {}) if is_card_profile(p) else None,
    )


def is_card_profile(p: Profile) -> bool:
    """The four card profiles (D19): `corporatePrepaidManagedCard`, ... ."""
    return p.kind.endswith("ManagedCard")


def _check_fees(kind: str, currencies: list[str], fees: dict[str, int] | None) -> None:
    """Fees belong to movement profiles, and only in the profile's currencies (D12)."""
    if fees is None:
        return
    if kind not in MOVEMENT_KINDS:
        raise Conflict("PROFILE_HAS_NO_FEES")
    if any(c not in currencies for c in fees):
        raise Conflict("CURRENCY_NOT_SUPPORTED_BY_PROFILE")


async def list_profiles(session: AsyncSession, programme: Programme) -> list[ProfileRead]:
    return [profile_read(p) for p in await repo.list_profiles(session, programme.id)]


async def create_profile(
    session: AsyncSession, clock: Clock, programme: Programme, data: ProfileCreate
) -> ProfileRead:
    _check_fees(data.kind, list(data.currencies), data.fees)
    movement = data.kind in MOVEMENT_KINDS
    profile = Profile(
        id=new_id(),
        programme_id=programme.id,
        kind=data.kind,
        currencies=list(data.currencies),
        active=data.active,
        fees=dict(data.fees or {}) if movement else None,
        created_at=clock.system_ms(),
    )
    session.add(profile)
    await session.flush()
    return profile_read(profile)


async def update_profile(
    session: AsyncSession, programme: Programme, profile_id: int, data: ProfileUpdate
) -> ProfileRead:
    profile = await repo.get_profile(session, programme.id, profile_id)
    if profile is None:
        raise NotFound("Profile not found")
    currencies = list(data.currencies) if data.currencies is not None else list(profile.currencies)
    _check_fees(profile.kind, currencies, data.fees)
    if data.currencies is not None:
        profile.currencies = currencies
    if data.active is not None:
        profile.active = data.active
    if data.returnFeeRefunded is not None:
        if profile.kind != "outgoingWireTransfers":
            raise Conflict("PROFILE_HAS_NO_RETURN_FEE")
        profile.return_fee_refunded = data.returnFeeRefunded
    if data.fees is not None:
        profile.fees = {**(profile.fees or {}), **data.fees}  # a new dict: JSON is not mutable
    if data.spendRules is not None:
        if not is_card_profile(profile):
            raise Conflict("PROFILE_HAS_NO_SPEND_RULES")
        # Checked with every card's own at its next authorisation (D22).
        profile.spend_rules = data.spendRules.stored() or None
    await session.flush()
    return profile_read(profile)


# Card fees (D19)


async def card_fees_of(session: AsyncSession, programme: Programme) -> CardFeesRead:
    _, currencies, _, _ = await _profiles_and_fees(session, programme)
    return CardFeesRead(**card_fees(programme, currencies))


async def set_card_fees(
    session: AsyncSession, programme: Programme, changes: dict[str, dict[str, int]]
) -> CardFeesRead:
    """Changes the card fees named (`{kind: {currency: amount}}`); a currency that is not the
    programme's is refused whole (`CURRENCY_NOT_SUPPORTED_BY_PROFILE`), as for payment fees."""
    _, currencies, _, _ = await _profiles_and_fees(session, programme)
    for kind, by_currency in changes.items():
        for currency, amount in by_currency.items():
            if currency not in currencies:
                raise Conflict("CURRENCY_NOT_SUPPORTED_BY_PROFILE")
            programme.card_fees = with_fee(programme, kind, currency, amount)
    await session.flush()
    return CardFeesRead(**card_fees(programme, currencies))


async def set_movement_fee(
    session: AsyncSession, programme: Programme, kind: str, currency: str, amount: int
) -> ProfileRead:
    """The fee of one payment kind in one currency, on the programme's profile of that kind
    (the one the D4 summary names): what the CLI changes, through the same rule as the portal."""
    if kind not in MOVEMENT_KINDS:
        raise NotFound(f"no payment kind {kind!r}: one of {', '.join(MOVEMENT_KINDS)}")
    profile = next(
        (p for p in await repo.list_profiles(session, programme.id) if p.kind == kind), None
    )
    if profile is None:
        raise NotFound(f"the programme has no {kind} profile")
    return await update_profile(
        session, programme, profile.id, ProfileUpdate(fees={currency: amount})
    )


# Fee types


async def list_fee_types(session: AsyncSession, programme: Programme) -> list[FeeTypeRead]:
    return [
        FeeTypeRead(name=f.name, amounts=f.amounts)
        for f in await repo.list_fee_types(session, programme.id)
    ]


async def create_fee_type(
    session: AsyncSession, clock: Clock, programme: Programme, data: FeeTypeCreate
) -> FeeTypeRead:
    if await repo.get_fee_type(session, programme.id, data.name) is not None:
        raise Conflict("FEE_TYPE_ALREADY_EXISTS")
    fee = FeeType(
        id=new_id(),
        programme_id=programme.id,
        name=data.name,
        amounts=data.amounts,
        created_at=clock.system_ms(),
    )
    session.add(fee)
    await session.flush()
    return FeeTypeRead(name=fee.name, amounts=fee.amounts)


async def replace_fee_type(
    session: AsyncSession, programme: Programme, name: str, data: FeeTypeWrite
) -> FeeTypeRead:
    fee = await repo.get_fee_type(session, programme.id, name)
    if fee is None:
        raise NotFound("Fee type not found")
    fee.amounts = data.amounts
    await session.flush()
    return FeeTypeRead(name=fee.name, amounts=fee.amounts)


async def set_fee_type_amount(
    session: AsyncSession,
    clock: Clock,
    programme: Programme,
    name: str,
    group: str,
    currency: str,
    amount: int,
) -> FeeTypeRead:
    """One fee group's amount in one currency of a fee type (made when missing), the others
    kept: the portal's form."""
    fee = await repo.get_fee_type(session, programme.id, name)
    if fee is None:
        data = FeeTypeCreate(name=name, amounts={group: {currency: amount}})
        return await create_fee_type(session, clock, programme, data)
    amounts = {g: dict(a) for g, a in fee.amounts.items()}
    amounts[group] = {**amounts.get(group, {}), currency: amount}
    return await replace_fee_type(session, programme, name, FeeTypeWrite(amounts=amounts))


async def fee_groups(session: AsyncSession, programme_id: int) -> set[str]:
    """Every fee group some fee type defines; any other group is FEE_GROUP_INVALID (D4)."""
    groups: set[str] = {"DEFAULT"}
    for f in await repo.list_fee_types(session, programme_id):
        groups.update(f.amounts)
    return groups


# How far ahead of real time a sandbox programme's clock may run: far enough for any expiry the
# settings allow (passwords: 10 years), near enough that every date stays a date (year < 10000)
# and every ms timestamp an int64 (decision 0038).
CLOCK_OFFSET_MAX_MS = 100 * 365 * 86400 * 1000


async def advance_clock(session: AsyncSession, programme: Programme, seconds: int) -> int:
    """Moves the programme's clock forward in SQL so concurrent advances add up; returns it.
    `seconds` is positive (the callers' models bound it); an advance that would take the clock
    more than CLOCK_OFFSET_MAX_MS ahead is refused whole (CLOCK_LIMIT_REACHED)."""
    step = seconds * 1000
    if not 0 < step <= CLOCK_OFFSET_MAX_MS:
        raise Conflict("CLOCK_LIMIT_REACHED", "a programme's clock runs at most 100 years ahead")
    stmt = (
        update(Programme)
        .where(
            Programme.id == programme.id,
            Programme.clock_offset_ms <= CLOCK_OFFSET_MAX_MS - step,
        )
        .values(clock_offset_ms=Programme.clock_offset_ms + step)
        .returning(Programme.clock_offset_ms)
    )
    offset = (await session.execute(stmt)).scalar_one_or_none()
    if offset is None:
        raise Conflict("CLOCK_LIMIT_REACHED", "a programme's clock runs at most 100 years ahead")
    programme.clock_offset_ms = offset
    return int(offset)


# Webhook secret (D16)


async def rotate_webhook_secret(session: AsyncSession, programme: Programme) -> str:
    """A new signing secret for a live programme's webhooks, answered once (the old one stops
    at once). A sandbox programme signs with its API key."""
    if programme.mode == "sandbox":
        raise Conflict(
            "WEBHOOK_SECRET_IS_API_KEY", "a sandbox programme's events are signed with its API key"
        )
    programme.webhook_secret = f"whsec_{secrets.token_urlsafe(32)}"
    await session.flush()
    return programme.webhook_secret
