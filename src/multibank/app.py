"""create_app(): mounts each interface version, the simulator, the operator API and operations."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import Protocol

from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.routing import Mount

from multibank import due_work
from multibank.api import dispatch, examples
from multibank.api.errors import install_error_handlers
from multibank.api.middleware import EdgeMiddleware, VersionShortcut
from multibank.api.openapi import DOCS_ASSETS, DOCS_ASSETS_URL, ServerApp
from multibank.api.versions import build_v3_1, build_v3_29, build_v3_63
from multibank.container import Container
from multibank.kernel import secrets as server_secrets
from multibank.kernel.carddata import CardKeyring
from multibank.kernel.db import Database
from multibank.kernel.hashing import PasswordHasher
from multibank.kernel.housekeeping import Housekeeper
from multibank.kernel.node_lease import NodeKeeper
from multibank.kernel.notify import build_notifier
from multibank.kernel.outbox import DeliveryPolicy, OutboxWorker
from multibank.kernel.ratelimit import RateLimiter
from multibank.kernel.tokens import TokenKeyring
from multibank.landing import router as landing_page
from multibank.observability import configure_logging, render_metrics
from multibank.portal.guard import admin_authenticated
from multibank.settings import Settings, get_settings
from multibank.simulator.kyc_page import router as kyc_pages
from multibank.simulator.router import build_simulator
from multibank.webhooks.delivery import WebhookWorker

BASES = {
    "/multi": "3.29.1",
    "/3.29.1/multi": "3.29.1",
    "/3.1.0/multi": "3.1.0",
    "/3.63.4/multi": "3.63.4",
}
SHORTCUT_BASES = (*BASES, "/simulate/api", "/portal/api")


def build_container(settings: Settings) -> Container:
    return Container(
        settings=settings,
        db=Database(
            settings.database_url,
            settings.database_echo,
            settings.database_pool_size,
            settings.database_pool_timeout_seconds,
        ),
        limiter=RateLimiter(settings.redis_url, namespace=settings.rate_limit_namespace),
        notifier=build_notifier(settings),
        hasher=PasswordHasher(
            settings.argon2_memory_kib,
            settings.argon2_time_cost,
            settings.argon2_parallelism,
            settings.argon2_threads,
        ),
    )


async def startup(container: Container) -> bool:
    """Loads (in sandbox: creates once) the signing keys and admin token. Returns True when the
    admin token was generated just now, so `serve` can print it."""
    now = container.clock.system_ms()
    s = container.settings
    spec = await server_secrets.jwt_keys(
        container.db, container.settings.jwt_keys, now, TokenKeyring.generate_spec()
    )
    container.keyring = TokenKeyring.parse(spec)
    missing = [n for n in ("card_data_key", "card_verification_key") if not getattr(s, n)]
    if s.mode == "live" and missing:
        # Settings refuse this already; a container built from copied settings is checked here
        # so no live server ever generates (and stores beside the data) its own card keys (D29).
        names = ", ".join(f"MULTIBANK_{n.upper()}" for n in missing)
        raise RuntimeError(f"live mode refuses to start without {names}")
    data_keys, verification_key = await server_secrets.card_keys(
        container.db,
        container.settings.card_data_key,
        container.settings.card_verification_key,
        now,
    )
    container.card_keyring = CardKeyring(data_keys, verification_key)
    container.admin_token, created = await server_secrets.admin_token(
        container.db, container.settings.admin_token, now
    )
    return created


# A young-generation collection every 20,000 allocations instead of 700: a read allocates
# hundreds of objects (ORM rows, pydantic, ASGI messages), and the collections that cascaded into
# the older generations, over every object the process holds, were the p99 of the reads (120 ms
# against a p50 of 15, decision 0014).
GC_THRESHOLDS = (20_000, 20, 20)


def tune_gc() -> None:
    """Once the application is built: what exists now lives as long as the process, so the
    collector stops scanning it (`gc.freeze`), and it collects the young generation less often."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def outbox_worker(container: Container) -> OutboxWorker | None:
    """The background delivery loop of this process, or None when `outbox_poll_seconds` is 0."""
    s = container.settings
    if s.outbox_poll_seconds <= 0:
        return None
    return OutboxWorker(
        container.db,
        container.notifier,
        container.clock,
        interval=s.outbox_poll_seconds,
        batch=s.outbox_batch_size,
        policy=DeliveryPolicy(max_attempts=s.outbox_max_attempts),
    )


class Background(Protocol):
    """A loop the server process runs beside its requests (kernel/loop.py and its kind)."""

    def start(self) -> None: ...

    async def stop(self) -> None: ...


def background(container: Container) -> list[Background]:
    """The loops this process runs, in the order they start (they stop in the reverse one);
    a loop whose interval is 0 is not run (one request at a time: tests, `sandbox seed`)."""
    s, db, clock = container.settings, container.db, container.clock
    loops: list[Background | None] = [
        # A sandbox's generated admin token may be rotated while it runs (decision 0067).
        None
        if s.admin_token
        else server_secrets.AdminTokenWatcher(
            db, lambda value: setattr(container, "admin_token", value), container.admin_token
        ),
        outbox_worker(container),
        Housekeeper(db, clock, s.housekeeping_interval_seconds, s.idempotency_retention_hours)
        if s.housekeeping_interval_seconds > 0
        else None,
        # Payment, IBAN and card steps as the programme clock makes them due (due_work.py).
        due_work.worker(db, clock, s.payments_poll_seconds)
        if s.payments_poll_seconds > 0
        else None,
        WebhookWorker(
            db,
            clock,
            s.webhooks_poll_seconds,
            s.webhooks_allow_private,
            int(s.webhooks_lease_seconds * 1000),
        )
        if s.webhooks_poll_seconds > 0
        else None,
    ]
    return [loop for loop in loops if loop is not None]


def lifespan_of(
    container: Container, serving: bool
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """Startup (keys, the docs' examples, this process's id node, the background loops) and,
    in reverse, shutdown; `serving`: a server process's, whose collector is tuned once built."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            stack.callback(container.hasher.close)
            stack.push_async_callback(container.db.dispose)
            if container.keyring is None:
                await startup(container)
            # The docs' request examples name the default programme's profiles.
            await examples.load(container.db)
            # This process's id node, leased from the database (kernel/node_lease.py).
            nodes = NodeKeeper(container.db, container.clock)
            await nodes.start()
            stack.push_async_callback(nodes.stop)
            for loop in background(container):
                loop.start()
                stack.push_async_callback(loop.stop)
            if serving:
                tune_gc()
            yield

    return lifespan


def add_operations(app: FastAPI, container: Container) -> None:
    """`/healthz`, `/readyz` and the operator's `/metrics`."""

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", include_in_schema=False)
    async def readyz() -> Response:
        try:
            await container.db.ping()
        except Exception:
            return JSONResponse({"status": "unavailable"}, status_code=503)
        return JSONResponse({"status": "ready"})

    @app.get("/metrics", include_in_schema=False)
    async def metrics(request: Request) -> Response:
        """Prometheus metrics, for the operator only: `Authorization: Bearer <admin token>`
        (routes, statuses and volumes say much about a deployment); wrong tokens are limited
        per client address as on the operator API (portal/guard.py)."""
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not await admin_authenticated(
            container, request, given.strip()
        ):
            return Response(status_code=401, headers={"www-authenticate": "Bearer"})
        body, content_type = render_metrics()
        return Response(body, media_type=content_type)


def create_app(
    settings: Settings | None = None,
    container: Container | None = None,
    serving: bool = False,
    portal: bool = True,
) -> FastAPI:
    """`serving`: the application is a server process's (not a test's): tune the collector.
    Not `portal`: without the operator's web portal and API, for a command that drives the
    customer API and the simulator in its own process (`webhooks trigger`): the portal's
    modules are then never imported, a few tenths of a second of its CPU (decision 0068)."""
    settings = settings or (container.settings if container else get_settings())
    container = container or build_container(settings)
    app = ServerApp(
        title="multibank",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        lifespan=lifespan_of(container, serving),
    )
    install_error_handlers(app)
    add_operations(app, container)

    app.mount("/multi", build_v3_29())
    app.mount("/3.29.1/multi", build_v3_29())
    app.mount("/3.1.0/multi", build_v3_1())
    # The 3.63 line, in progress (D34): its own base until it is whole.
    app.mount("/3.63.4/multi", build_v3_63())
    app.include_router(kyc_pages)
    app.include_router(landing_page)
    app.mount("/simulate/api", build_simulator())
    if portal:
        from multibank.portal.audit_pages import pages as audit_pages
        from multibank.portal.router import build_portal
        from multibank.portal.web import router as portal_pages

        app.mount("/portal/api", build_portal())
        # The web portal's pages (D17), beside its API.
        app.include_router(portal_pages)
        app.include_router(audit_pages)

    @app.get("/docs", include_in_schema=False)
    async def docs_root() -> RedirectResponse:
        """The latest version's docs (the home page at / lists every base's)."""
        return RedirectResponse("/multi/docs", status_code=307)

    @app.get("/redoc", include_in_schema=False)
    async def redoc_root() -> RedirectResponse:
        return RedirectResponse("/multi/redoc", status_code=307)

    # A base URL without its slash leads to its docs in one hop (with the slash, the base's own
    # application answers: DescribedApp).
    for base in (*BASES, "/simulate/api", *(("/portal/api",) if portal else ())):
        app.add_api_route(
            base, _docs_redirect(base), methods=["GET", "HEAD"], include_in_schema=False
        )

    if portal:
        from multibank.portal.web import fallback as portal_fallback

        @app.get("/portal", include_in_schema=False)
        async def portal_root() -> RedirectResponse:
            return RedirectResponse("/portal/", status_code=308)

        # After every /portal route above: an address under /portal/ that none answers.
        app.include_router(portal_fallback)

    app.mount(DOCS_ASSETS_URL, StaticFiles(directory=DOCS_ASSETS), name="docs-assets")
    add_request_path(app, container)
    app.state.container = container
    return app


def add_request_path(app: FastAPI, container: Container) -> None:
    """Once every route is in: the dispatch of each router, the shortcut to the base URLs'
    applications and the middleware, outermost last."""
    # Every router of the server tries first the routes a request can match (api/dispatch.py):
    # the outer application's, and each mounted application's (versions, simulator, operator).
    dispatch.install(app.router)
    for route in app.routes:
        if isinstance(route, Mount) and isinstance(route.app, FastAPI):
            dispatch.install(route.app.router)
    # The base URLs' applications, reached without the outer walk: no outer route before their
    # mounts can match a path under them (tests/api/test_dispatch.py).
    shortcut = [r for r in app.routes if isinstance(r, Mount) and r.path in SHORTCUT_BASES]
    app.add_middleware(VersionShortcut, mounts=shortcut)
    if container.settings.cors_allowed_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=container.settings.cors_allowed_origins,
            allow_methods=["GET", "POST", "PATCH", "PUT", "DELETE"],
            allow_headers=["api-key", "authorization", "content-type", "idempotency-ref", "accept"],
            expose_headers=["request-ref", "x-ratelimit-limit", "x-ratelimit-reset"],
        )
    app.add_middleware(EdgeMiddleware, container=container)


def _docs_redirect(base: str) -> Callable[[], Awaitable[RedirectResponse]]:
    async def to_docs() -> RedirectResponse:
        return RedirectResponse(f"{base}/docs", status_code=307)

    return to_docs


def app_factory() -> FastAPI:
    """Entry point for uvicorn workers (`--factory`)."""
    settings = get_settings()
    configure_logging(settings.log_level, settings.log_json)
    return create_app(settings, serving=True)
