"""Operator API: programmes and settings, API keys, profiles and fee types.

The CLI calls the same `programmes.service` functions, so both always agree.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, FastAPI, Path, Query, Request, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from multibank.accounts import repository as accounts_repo
from multibank.accounts import service as accounts
from multibank.accounts.models import ManagedAccount
from multibank.api.deps import AppContainer, Db, conflicts
from multibank.api.errors import install_error_handlers
from multibank.api.openapi import DescribedApp, answers, not_found
from multibank.api.routing import UnitOfWorkRouter
from multibank.kernel.errors import NotFound, Unauthorized
from multibank.portal import card_pool
from multibank.portal.auditing import AuditedRoute
from multibank.portal.guard import admin_authenticated
from multibank.programmes import repository, service
from multibank.programmes.context import Ctx
from multibank.programmes.models import Programme
from multibank.programmes.schemas import (
    ApiKeyCreate,
    ApiKeyCreated,
    ApiKeyRead,
    FeeTypeCreate,
    FeeTypeRead,
    FeeTypeWrite,
    ProfileCreate,
    ProfileRead,
    ProfileUpdate,
    ProgrammeCreate,
    ProgrammeDescription,
    ProgrammeRead,
    ProgrammeSettings,
    ProgrammeSettingsUpdate,
)
from multibank.reconciliation import verify_alone
from multibank.webhooks import service as webhooks
from multibank.webhooks.schemas import DeliveriesPage, DeliveryRead, WebhookSecretRead

admin_scheme = HTTPBearer(scheme_name="admin_token", auto_error=False)
INT64_MAX = 2**63 - 1


@answers(401, 429)
async def require_admin(
    request: Request,
    container: AppContainer,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(admin_scheme)],
) -> None:
    given = credentials.credentials if credentials else ""
    if not await admin_authenticated(container, request, given):
        raise Unauthorized()


# An address that sent too many wrong admin tokens is refused for a while, whatever it sends.
THROTTLED: dict[int | str, dict[str, Any]] = {
    429: {
        "description": "Too many wrong admin tokens from this client address "
        "(`MULTIBANK_RATE_LIMIT_ADMIN_AUTH`): every admin request from it is refused, the right "
        "token included, until Retry-After seconds have passed. No body.",
        "headers": {
            "Retry-After": {"$ref": "#/components/headers/Retry-After"},
            "x-ratelimit-limit": {"$ref": "#/components/headers/x-ratelimit-limit"},
            "x-ratelimit-reset": {"$ref": "#/components/headers/x-ratelimit-reset"},
        },
    }
}


router = UnitOfWorkRouter(
    prefix="/programmes",
    tags=["Programmes"],
    route_class=AuditedRoute,
    dependencies=[Depends(require_admin)],
    responses=THROTTLED,
)

IdPath = Annotated[str, Path(pattern=r"^[0-9]{1,19}$")]


def int_id(value: str, what: str) -> int:
    number = int(value)
    if number > INT64_MAX:
        raise NotFound(f"{what} not found")
    return number


async def programme_path(db: Db, programme_id: IdPath) -> Programme:
    return await service.require_programme(db, int_id(programme_id, "Programme"))


ProgrammePath = Annotated[Programme, Depends(programme_path)]


@router.get("", operation_id="programmesList")
async def list_programmes(db: Db) -> list[ProgrammeRead]:
    return [await service.read(db, p) for p in await repository.list_programmes(db)]


@router.post(
    "",
    operation_id="programmeCreate",
    status_code=201,
    responses=conflicts("PROGRAMME_NAME_NOT_UNIQUE", "WEBHOOK_URL_NOT_ALLOWED"),
)
async def create_programme(
    body: ProgrammeCreate, db: Db, container: AppContainer
) -> ProgrammeDescription:
    """Creates a programme with its four profiles, the ADMIN_FEE fee type and a first API key
    (shown in this response; a sandbox programme's key can be shown again)."""
    programme, key = await service.create_programme(
        db, container.clock, body, container.settings.webhooks_allow_private
    )
    return await service.describe(db, programme, api_key=key)


@router.get("/{programme_id}", operation_id="programmeGet")
async def get_programme(programme: ProgrammePath, db: Db) -> ProgrammeRead:
    return await service.read(db, programme)


@router.get("/{programme_id}/summary", operation_id="programmeSummary")
async def programme_summary(programme: ProgrammePath, db: Db) -> ProgrammeDescription:
    """The D4 shape that `multibank programme show NAME --json` prints."""
    return await service.describe(db, programme)


@router.patch(
    "/{programme_id}/settings",
    operation_id="programmeSettingsUpdate",
    responses=conflicts("WEBHOOK_URL_NOT_ALLOWED"),
)
async def update_settings(
    body: ProgrammeSettingsUpdate, programme: ProgrammePath, db: Db, container: AppContainer
) -> ProgrammeSettings:
    """Changes the settings sent. `webhookUrl` (null: none) is where the programme's events go;
    a live programme's may not resolve to a loopback, link-local or private address
    (`WEBHOOK_URL_NOT_ALLOWED`) unless the server's `MULTIBANK_WEBHOOKS_ALLOW_PRIVATE` is on."""
    return await service.update_settings(
        db, programme, body, container.settings.webhooks_allow_private
    )


@router.get("/{programme_id}/api_keys", operation_id="apiKeysList")
async def list_keys(programme: ProgrammePath, db: Db) -> list[ApiKeyRead]:
    return await service.list_api_keys(db, programme)


@router.post("/{programme_id}/api_keys", operation_id="apiKeyCreate", status_code=201)
async def create_key(
    programme: ProgrammePath,
    db: Db,
    container: AppContainer,
    body: ApiKeyCreate | None = Body(default=None),
) -> ApiKeyCreated:
    """Creates a key; its plaintext is in this answer only (sandbox keys can be shown again)."""
    label = body.label if body else None
    return await service.create_api_key(db, container.clock, programme, label)


@router.delete("/{programme_id}/api_keys/{key_id}", operation_id="apiKeyRevoke")
async def revoke_key(
    key_id: IdPath, programme: ProgrammePath, db: Db, container: AppContainer
) -> ApiKeyRead:
    """Revokes a key: the next request with it answers 401 (in another server process, one
    that comes half a second later: api/authcache.py)."""
    return await service.revoke_api_key(db, container.clock, programme, int_id(key_id, "API key"))


# `fees` only on movement profiles (D12).
@router.get(
    "/{programme_id}/profiles", operation_id="profilesList", response_model_exclude_none=True
)
async def list_profiles(programme: ProgrammePath, db: Db) -> list[ProfileRead]:
    return await service.list_profiles(db, programme)


# D12: fees belong to movement profiles (transfers, sends, outgoingWireTransfers), in the
# profile's own currencies.
FEE_CONFLICTS = conflicts("PROFILE_HAS_NO_FEES", "CURRENCY_NOT_SUPPORTED_BY_PROFILE")


@router.post(
    "/{programme_id}/profiles",
    operation_id="profileCreate",
    status_code=201,
    responses=FEE_CONFLICTS,
    response_model_exclude_none=True,
)
async def create_profile(
    body: ProfileCreate, programme: ProgrammePath, db: Db, container: AppContainer
) -> ProfileRead:
    return await service.create_profile(db, container.clock, programme, body)


@router.patch(
    "/{programme_id}/profiles/{profile_id}",
    operation_id="profileUpdate",
    responses=conflicts(
        "PROFILE_HAS_NO_FEES",
        "CURRENCY_NOT_SUPPORTED_BY_PROFILE",
        "PROFILE_HAS_NO_RETURN_FEE",
        "PROFILE_HAS_NO_SPEND_RULES",
    ),
    response_model_exclude_none=True,
)
async def update_profile(
    body: ProfileUpdate, profile_id: IdPath, programme: ProgrammePath, db: Db
) -> ProfileRead:
    """Changes the fields sent; `fees` changes the fee of each currency it names;
    `returnFeeRefunded` (outgoing wire transfer profiles) gives a returned transfer's fee back;
    `spendRules` (card profiles) replaces the profile-level spend rules, checked with each
    card's own at authorisation (`{}` clears them).
    A programme's currencies are its profiles': a currency no profile had yet becomes one."""
    return await service.update_profile(db, programme, int_id(profile_id, "Profile"), body)


@router.get("/{programme_id}/fee_types", operation_id="feeTypesList")
async def list_fee_types(programme: ProgrammePath, db: Db) -> list[FeeTypeRead]:
    return await service.list_fee_types(db, programme)


@router.post(
    "/{programme_id}/fee_types",
    operation_id="feeTypeCreate",
    status_code=201,
    responses=conflicts("FEE_TYPE_ALREADY_EXISTS"),
)
async def create_fee_type(
    body: FeeTypeCreate, programme: ProgrammePath, db: Db, container: AppContainer
) -> FeeTypeRead:
    return await service.create_fee_type(db, container.clock, programme, body)


@router.put(
    "/{programme_id}/fee_types/{name}",
    operation_id="feeTypeReplace",
    responses=not_found("no fee type of that name"),
)
async def replace_fee_type(
    body: FeeTypeWrite,
    programme: ProgrammePath,
    db: Db,
    name: Annotated[str, Path(pattern=r"^[A-Za-z0-9_-]{1,50}$")],
) -> FeeTypeRead:
    return await service.replace_fee_type(db, programme, name, body)


async def _ctx(db: Db, programme: ProgrammePath, container: AppContainer) -> Ctx:
    return Ctx(db, programme, container.clock.now_ms(programme.clock_offset_ms))


PortalCtx = Annotated[Ctx, Depends(_ctx)]


async def _account(ctx: Ctx, account_id: str) -> ManagedAccount:
    account = await accounts_repo.get_in_programme(
        ctx.db, ctx.programme.id, int_id(account_id, "Managed account"), for_update=True
    )
    if account is None:
        raise NotFound("Managed account not found")
    return account


@router.post(
    "/{programme_id}/managed_accounts/{account_id}/block",
    operation_id="managedAccountSystemBlock",
    status_code=204,
    response_class=Response,
    responses=conflicts("INSTRUMENT_ALREADY_BLOCKED", "INSTRUMENT_DESTROYED"),
)
async def system_block(account_id: IdPath, ctx: PortalCtx) -> Response:
    """Blocks an account with reason SYSTEM, which its users cannot lift."""
    await accounts.block(ctx, await _account(ctx, account_id), "SYSTEM")
    return Response(status_code=204)


@router.post(
    "/{programme_id}/managed_accounts/{account_id}/unblock",
    operation_id="managedAccountSystemUnblock",
    status_code=204,
    response_class=Response,
    responses=conflicts("INSTRUMENT_NOT_BLOCKED", "INSTRUMENT_DESTROYED", "INSTRUMENT_INACTIVE"),
)
async def system_unblock(account_id: IdPath, ctx: PortalCtx) -> Response:
    """Lifts any block, the operator's own SYSTEM blocks included."""
    await accounts.unblock(ctx, await _account(ctx, account_id), by_operator=True)
    return Response(status_code=204)


# Webhooks (D16)

DeliveryState = Annotated[str | None, Query(pattern="^(PENDING|DELIVERED|FAILED)$")]


@router.post(
    "/{programme_id}/webhook_secret",
    operation_id="webhookSecretRotate",
    responses=conflicts("WEBHOOK_SECRET_IS_API_KEY"),
)
async def rotate_webhook_secret(programme: ProgrammePath, db: Db) -> WebhookSecretRead:
    """A live programme's new webhook signing secret, shown in this answer only; the old one
    stops signing at once. A sandbox programme signs with its API key."""
    return WebhookSecretRead(webhookSecret=await service.rotate_webhook_secret(db, programme))


@router.get(
    "/{programme_id}/webhooks/deliveries",
    operation_id="webhookDeliveriesList",
    response_model=DeliveriesPage,
)
async def webhook_deliveries(
    programme: ProgrammePath,
    db: Db,
    eventType: Annotated[str | None, Query(max_length=80)] = None,
    state: DeliveryState = None,
    offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
) -> dict[str, Any]:
    """The programme's webhook events, newest first, each with its attempts (time, outcome,
    response code, error, the start of the answer). `eventType` is a type
    (`managed_accounts.CREATED`) or a topic (`managed_accounts`)."""
    return await webhooks.page(db, programme.id, eventType, state, offset, limit)


@router.get(
    "/{programme_id}/webhooks/deliveries/{delivery_id}",
    operation_id="webhookDeliveryGet",
    response_model=DeliveryRead,
    responses=not_found("no webhook delivery of that id in this programme"),
)
async def webhook_delivery(delivery_id: IdPath, programme: ProgrammePath, db: Db) -> dict[str, Any]:
    return await webhooks.get(db, programme.id, int_id(delivery_id, "Webhook delivery"))


@router.post(
    "/{programme_id}/webhooks/deliveries/{delivery_id}/redeliver",
    operation_id="webhookDeliveryRedeliver",
    response_model=DeliveryRead,
    responses=not_found("no webhook delivery of that id in this programme"),
)
async def webhook_redeliver(delivery_id: IdPath, ctx: PortalCtx) -> dict[str, Any]:
    """Sends the event again (same call-ref and payload) as a new series of attempts due now,
    in any state: a pending one is attempted now instead of at its next retry."""
    return await webhooks.redeliver(ctx, int_id(delivery_id, "Webhook delivery"))


@router.get("/{programme_id}/ledger/verify", operation_id="ledgerVerify")
async def ledger_verify(programme: ProgrammePath, container: AppContainer) -> dict[str, object]:
    """The D5 invariants for this programme: `ok` and the violations found."""
    violations = await verify_alone(container.db, programme.id)
    return {"ok": not violations, "violations": [v.__dict__ for v in violations]}


router.include_router(card_pool.router)  # after the routes above: it takes the admin check
ROUTERS: list[APIRouter] = [router]


def build_portal() -> FastAPI:
    from multibank.portal import audit_pages, cards  # they build on this module's dependencies

    app = DescribedApp(
        title="multibank operator API",
        version="1",
        openapi_url="/openapi.json",
        docs_url="/docs",
        redoc_url="/redoc",
    )
    install_error_handlers(app)
    for r in [*ROUTERS, cards.router, audit_pages.api]:
        app.include_router(r)
    return app
