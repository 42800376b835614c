"""`multibank serve`: the API, with the `default` sandbox programme made on the first start."""

from __future__ import annotations

import errno
import os
import socket
import sys
import tempfile
from typing import TYPE_CHECKING, Annotated

import typer

from multibank.cli.common import (
    CANNOT_START,
    DEFAULT_PROGRAMME,
    admin_token_source,
    base_url_lines,
    ensure_default_programme,
    fail,
    load_settings,
    loading_the_server,
    run,
)
from multibank.kernel.clock import Clock

if TYPE_CHECKING:
    from multibank.kernel.db import Database
    from multibank.programmes.schemas import ProgrammeDescription


def _can_listen(host: str, port: int) -> None:
    """Says in one line, and exits 2, when `serve` cannot listen on `host`:`port` (taken, or no
    such interface). Binds each address the way uvicorn will (SO_REUSEADDR), then lets go:
    uvicorn binds again when it starts, so another process could still take the port in
    between; `serve` checks before it touches the database and again before it prints where
    it serves, which leaves that gap at the second or so uvicorn takes to start (decision
    0040)."""
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        found = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        for family, kind, proto, _, address in found:
            with socket.socket(family, kind, proto) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:  # as asyncio's create_server binds it
                    probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                probe.bind(address)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        if exc.errno == errno.EADDRINUSE:
            reason += " (another process listens there: stop it, or choose another --port)"
        fail(f"cannot listen on {where}: {reason}", CANNOT_START)


async def _upgrade_for_serve(db: Database) -> None:
    """Migrates a database behind this release. Running as a server role that may not (decision
    0075), says in one line to run `db upgrade` as the schema's owner."""
    from sqlalchemy.exc import DBAPIError

    from multibank.kernel.migrate import current_revision, head_revision, upgrade

    if await current_revision(db) == head_revision():
        return  # nothing to do: no DDL attempted, which the server's role could not run
    try:
        await upgrade(db)
    except DBAPIError as exc:
        if "permission denied" in str(exc) or "must be owner" in str(exc):
            fail(
                "the database schema is behind this release and this role may not change it: "
                "run `multibank db upgrade` as the schema's owner first",
                CANNOT_START,
            )
        raise


def serve(
    host: Annotated[
        str, typer.Option(metavar="HOST", help="Interface (address) to listen on.")
    ] = "127.0.0.1",
    port: Annotated[
        int, typer.Option(min=1, max=65535, metavar="PORT", help="TCP port to listen on.")
    ] = 8000,
    workers: Annotated[
        int, typer.Option(min=1, metavar="N", help="Worker processes serving requests.")
    ] = 1,
) -> None:
    """Serve the API, with the `default` sandbox programme created on the first start.

    Updates the database schema first, then prints where the API listens and the `default`
    programme's id, API key and profiles."""
    # Settings and the port are checked before the server's modules load (about 2 s of
    # imports): a refusal comes at once.
    settings = load_settings()
    _can_listen(host, port)
    with loading_the_server():
        import uvicorn

        from multibank.app import build_container, startup
        from multibank.kernel.node_lease import NodeKeeper

    async def prepare(db: Database) -> tuple[ProgrammeDescription, bool, str | None]:
        await _upgrade_for_serve(db)
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

    description, created, admin_token = run(
        prepare, settings, creates=True, wait_seconds=settings.database_startup_timeout_seconds
    )
    _can_listen(host, port)  # again: the database may have taken a minute to answer
    base = f"http://{host}:{port}"
    lines = [
        f"multibank serving on {base} ({'SQLite' if settings.is_sqlite else 'PostgreSQL'})",
        *base_url_lines(base),
        f"  admin token:     {admin_token_source(settings, admin_token)}",
        f"programme '{DEFAULT_PROGRAMME}'{' (created now)' if created else ''}: "
        f"id {description.programmeId}",
        f"  api-key: {description.apiKey or '(revoked; create one with the operator API)'}",
        f"  profiles: {description.profiles.model_dump_json()}",
    ]
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
