"""The `multibank` command: serve, db, programme, ledger, webhooks. Every operator action calls
the same services as the operator API, so the two never disagree."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, NoReturn, TypeVar

import typer
import uvicorn
from pydantic import ValidationError
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from multibank.kernel.clock import Clock
from multibank.kernel.db import Database
from multibank.kernel.errors import Conflict, NotFound
from multibank.kernel.migrate import current_revision, head_revision, upgrade
from multibank.kernel.node_lease import NodeKeeper
from multibank.programmes import repository, service
from multibank.programmes.schemas import ProfileUpdate, ProgrammeCreate, ProgrammeDescription
from multibank.settings import Settings, get_settings

T = TypeVar("T")

app = typer.Typer(help="multibank: a self-hostable Multi Product Banking Service server.")
db_app = typer.Typer(help="Database schema.")
programme_app = typer.Typer(help="Programmes (tenants) and their API keys.")
app.add_typer(db_app, name="db")
app.add_typer(programme_app, name="programme")
ledger_app = typer.Typer(help="The double-entry ledger.")
app.add_typer(ledger_app, name="ledger")
webhooks_app = typer.Typer(help="Webhook events.")
app.add_typer(webhooks_app, name="webhooks")

DEFAULT_PROGRAMME = "default"


def _run(
    work: Callable[[Database], Awaitable[T]],
    settings: Settings | None = None,
    creates: bool = False,
) -> T:
    """Runs `work` on the configured database. Unless the command `creates` the schema (`db
    upgrade`, `programme create`), a missing, unreachable or unmigrated database is said in one
    line and exits 2, and nothing is created (a SQLite path is not even touched)."""
    settings = settings or get_settings()
    url = make_url(settings.database_url)
    where = url.render_as_string(hide_password=True)
    if not creates and url.get_backend_name() == "sqlite":
        path = url.database or ""
        if path and path != ":memory:" and not Path(path).exists():
            _fail(f"no database at {path}: run `multibank db upgrade` (or `multibank serve`)", 2)

    async def main() -> T:
        db = Database(settings.database_url, settings.database_echo)
        try:
            if not creates:
                revision = await current_revision(db)
                if revision is None:
                    _fail(f"the database at {where} is not migrated: run `multibank db upgrade`", 2)
                elif revision != head_revision():
                    _fail(
                        f"the database at {where} is at {revision}: run `multibank db upgrade`", 2
                    )
            return await work(db)
        finally:
            await db.dispose()

    try:
        return asyncio.run(main())
    except (OSError, SQLAlchemyError) as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0][:200]
        _fail(f"cannot use the database at {where}: {reason}", 2)


def _fail(message: str, code: int = 1) -> NoReturn:
    typer.echo(message, err=True)
    raise typer.Exit(code)


async def ensure_default_programme(db: Database) -> tuple[ProgrammeDescription, bool]:
    """D4: the `default` sandbox programme exists after the first start; returns it and whether it
    was created now. Several processes may start at once: the unique name settles the race."""
    async with db.transaction() as session:
        existing = await repository.get_programme_by_name(session, DEFAULT_PROGRAMME)
        if existing is not None:
            return await service.describe(session, existing), False
    try:
        async with db.transaction() as session:
            programme, key = await service.create_programme(
                session, Clock(), ProgrammeCreate(name=DEFAULT_PROGRAMME)
            )
            return await service.describe(session, programme, api_key=key), True
    except Exception:
        async with db.transaction() as session:
            existing = await repository.get_programme_by_name(session, DEFAULT_PROGRAMME)
            if existing is None:
                raise
            return await service.describe(session, existing), False


async def _reachable(db: Database, within: float) -> None:
    """Waits up to `within` seconds for the database to answer (it may be starting with us),
    saying so once; then the last error stands."""
    deadline = time.monotonic() + within
    said = False
    while True:
        try:
            async with db.engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
            return
        except (OSError, SQLAlchemyError) as exc:
            if time.monotonic() >= deadline:
                raise
            if not said:
                reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0][:200]
                typer.echo(f"waiting up to {within:g} s for the database: {reason}", err=True)
                said = True
            await asyncio.sleep(1)


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
    workers: Annotated[int, typer.Option(min=1, help="Worker processes.")] = 1,
) -> None:
    """Apply migrations, create the `default` sandbox programme on first start, and serve."""
    from multibank.app import build_container, startup

    settings = get_settings()

    async def prepare(db: Database) -> tuple[ProgrammeDescription, bool, str | None]:
        await _reachable(db, settings.database_startup_timeout_seconds)
        await upgrade(db)
        nodes = NodeKeeper(db, Clock())
        await nodes.start(renew_in_background=False)
        try:
            description, created = await ensure_default_programme(db)
        finally:
            await nodes.stop()
        container = build_container(settings)
        try:
            generated = await startup(container)
        finally:
            await container.db.dispose()
        return description, created, container.admin_token if generated else None

    description, created, admin_token = _run(prepare, settings, creates=True)
    base = f"http://{host}:{port}"
    lines = [
        f"multibank serving on {base} ({'SQLite' if settings.is_sqlite else 'PostgreSQL'})",
        f"  3.29.1 (latest): {base}/multi        docs: {base}/multi/docs",
        f"  3.29.1:          {base}/3.29.1/multi docs: {base}/3.29.1/multi/docs",
        f"  3.1.0:           {base}/3.1.0/multi  docs: {base}/3.1.0/multi/docs",
        f"  simulator:       {base}/simulate/api  operator API: {base}/portal/api",
        f"programme '{DEFAULT_PROGRAMME}'{' (created now)' if created else ''}: "
        f"id {description.programmeId}",
        f"  api-key: {description.apiKey or '(revoked; create one with the operator API)'}",
        f"  profiles: {description.profiles.model_dump_json()}",
    ]
    if admin_token:
        lines.append(f"  operator API admin token (generated, shown once): {admin_token}")
    typer.echo("\n".join(lines))
    sys.stdout.flush()
    if workers > 1 and "PROMETHEUS_MULTIPROC_DIR" not in os.environ:
        # /metrics must add up every worker's counters, whichever worker answers it.
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="multibank-metrics-")
    from multibank.observability import configure_logging

    # uvicorn's own lines (start-up, shutdown, errors) go through the same JSON formatter.
    configure_logging(settings.log_level, settings.log_json)
    uvicorn.run(
        "multibank.app:app_factory",
        log_config=None,
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level=settings.log_level.lower(),
        access_log=False,
        proxy_headers=False,
        server_header=False,  # no `server: uvicorn` banner
        # A worker that is still importing and migrating on a busy machine is not dead.
        timeout_worker_healthcheck=60,
    )


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Apply every Alembic migration not yet applied."""
    _run(upgrade, creates=True)
    typer.echo("database is up to date")


@programme_app.command("create")
def programme_create(
    name: Annotated[str, typer.Option("--name", help="Unique programme name.")],
    live: Annotated[bool, typer.Option("--live", help="Live mode (default: sandbox).")] = False,
    step_up_required: Annotated[bool, typer.Option("--step-up-required")] = False,
    failed_login_limit: Annotated[int, typer.Option("--failed-login-limit", min=1)] = 5,
    iban_allocation_delay: Annotated[int, typer.Option("--iban-allocation-delay", min=0)] = 2,
    webhook_url: Annotated[
        str | None,
        typer.Option(
            "--webhook-url",
            metavar="URL",
            help="Where the programme's webhook events go (each to URL + its path).",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the D4 JSON shape.")] = False,
) -> None:
    """Create a programme with its profiles, the ADMIN_FEE fee type and a first API key."""
    try:
        data = ProgrammeCreate(
            name=name,
            mode="live" if live else "sandbox",
            stepUpRequired=step_up_required,
            failedLoginLimit=failed_login_limit,
            ibanAllocationDelaySeconds=iban_allocation_delay,
            webhookUrl=webhook_url,
        )
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        _fail(f"cannot create programme {name!r}: {problems}")
        return

    async def work(db: Database) -> ProgrammeDescription:
        await upgrade(db)
        nodes = NodeKeeper(db, Clock())
        await nodes.start(renew_in_background=False)
        try:
            async with db.transaction() as session:
                programme, key = await service.create_programme(
                    session, Clock(), data, get_settings().webhooks_allow_private
                )
                return await service.describe(session, programme, api_key=key)
        finally:
            await nodes.stop()

    try:
        description = _run(work, creates=True)
    except Conflict as exc:
        reason = f"{exc.error_code} ({exc.message})" if exc.message else exc.error_code
        _fail(f"cannot create programme {name!r}: {reason}")
        return
    _print_description(description, as_json)


@programme_app.command("show")
def programme_show(
    name: str,
    as_json: Annotated[bool, typer.Option("--json", help="Print the D4 JSON shape.")] = False,
) -> None:
    """Show a programme: id, API key (sandbox only), profiles, currencies and fee types."""

    async def work(db: Database) -> ProgrammeDescription:
        async with db.transaction() as session:
            programme = await service.require_programme_by_name(session, name)
            return await service.describe(session, programme)

    try:
        description = _run(work)
    except NotFound as exc:
        _fail(exc.message)
        return
    _print_description(description, as_json)


@programme_app.command("list")
def programme_list() -> None:
    """One line per programme: id, name, mode."""

    async def work(db: Database) -> list[tuple[int, str, str]]:
        async with db.transaction() as session:
            return [(p.id, p.name, p.mode) for p in await repository.list_programmes(session)]

    for pid, pname, mode in _run(work):
        typer.echo(f"{pid}\t{pname}\t{mode}")


@programme_app.command("movement-fee")
def programme_movement_fee(
    name: str,
    payment: Annotated[
        str,
        typer.Option(
            "--payment", help="transfers, sends or outgoingWireTransfers (outgoing wire transfers)."
        ),
    ],
    currency: Annotated[str, typer.Option("--currency", help="ISO-4217 code, e.g. EUR.")],
    amount: Annotated[int, typer.Option("--amount", min=0, help="The fee, in minor units.")],
) -> None:
    """Set what a payment of one kind costs in one currency, on top of its amount (the source
    pays it; it goes to the programme's revenue). Prints the programme's payment fees."""
    try:
        fees = ProfileUpdate(fees={currency: amount}).fees or {}
    except ValidationError as exc:
        problems = "; ".join(e["msg"] for e in exc.errors())
        _fail(f"cannot set the fee: {problems}")
        return

    async def work(db: Database) -> ProgrammeDescription:
        async with db.transaction() as session:
            programme = await service.require_programme_by_name(session, name)
            for code, value in fees.items():
                await service.set_movement_fee(session, programme, payment, code, value)
            return await service.describe(session, programme)

    try:
        description = _run(work)
    except NotFound as exc:
        _fail(exc.message)
        return
    except Conflict as exc:
        _fail(f"cannot set the fee: {exc.error_code} ({currency} is not a currency of {name!r})")
        return
    typer.echo(json.dumps(description.movementFees.model_dump()))


def _print_description(description: ProgrammeDescription, as_json: bool) -> None:
    data = description.model_dump()
    if as_json:
        typer.echo(json.dumps(data))
        return
    typer.echo(f"programme {data['programmeId']}")
    typer.echo(f"  api-key: {data['apiKey'] or '(not shown)'}")
    for kind, pid in data["profiles"].items():
        typer.echo(f"  profile {kind}: {pid}")
    typer.echo(f"  currencies: {', '.join(data['currencies'])}")
    typer.echo(f"  fee types: {', '.join(data['feeTypes'])}")
    for kind, fees in data["movementFees"].items():
        listed = ", ".join(f"{c} {amount}" for c, amount in fees.items())
        typer.echo(f"  {kind} fee (minor units): {listed}")


@ledger_app.command("verify")
def ledger_verify(
    programme: Annotated[str | None, typer.Option(help="Only this programme (name).")] = None,
) -> None:
    """Check the D5 invariants: every currency of every programme sums to zero, and every
    account's balance equals its postings. Exits 1 on any violation."""
    from multibank.ledger.verify import verify

    async def work(db: Database) -> list[str]:
        async with db.transaction() as session:
            pid = None
            if programme is not None:
                pid = (await service.require_programme_by_name(session, programme)).id
            return [f"{v.what}: {v.detail}" for v in await verify(session, pid)]

    try:
        problems = _run(work)
    except NotFound as exc:
        _fail(exc.message)
        return
    for line in problems:
        typer.echo(line, err=True)
    if problems:
        _fail(f"ledger verify: {len(problems)} violation(s)")
    typer.echo("ledger verify: ok")


@webhooks_app.command("listen")
def webhooks_listen(
    programme: Annotated[
        str, typer.Option(help="The programme (name) whose events to receive.")
    ] = DEFAULT_PROGRAMME,
    port: Annotated[
        int, typer.Option(min=0, max=65535, help="TCP port to receive on (0: any free one).")
    ] = 8787,
    host: Annotated[
        str, typer.Option(help="Interface to receive on; the webhook URL names it.")
    ] = "127.0.0.1",
) -> None:
    """Receive a programme's webhook events here: point its webhook URL at a receiver started
    now, and print each event as it arrives (path, event type, resource id) with whether both
    of its signatures verify. Ctrl-C puts the previous webhook URL back."""
    from multibank.webhooks.listen import ListenError, listen

    async def work(db: Database) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await listen(db, programme, host, port, typer.echo, stop)

    try:
        _run(work)
    except NotFound as exc:
        _fail(exc.message)
    except ListenError as exc:
        _fail(str(exc))


@webhooks_app.command("deliver")
def webhooks_deliver() -> None:
    """Deliver webhook events from this process, without serving the API: run it beside API
    processes started with MULTIBANK_WEBHOOKS_POLL_SECONDS=0, so sending events never takes
    their CPU. Any number may run at once; Ctrl-C stops it."""
    from multibank.webhooks.delivery import WebhookWorker

    settings = get_settings()

    async def work(db: Database) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        worker = WebhookWorker(
            db,
            Clock(),
            settings.webhooks_poll_seconds or 0.5,
            settings.webhooks_allow_private,
            int(settings.webhooks_lease_seconds * 1000),
        )
        worker.start()
        typer.echo("delivering webhook events (Ctrl-C stops)")
        try:
            await stop.wait()
        finally:
            await worker.stop()
        typer.echo("stopped")

    _run(work, settings)


def main() -> None:
    app()
