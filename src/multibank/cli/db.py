"""`multibank db`: the database schema."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from multibank.cli.common import (
    CANNOT_START,
    OperatorApp,
    database_said,
    fail,
    load_settings,
    run,
)

if TYPE_CHECKING:
    from multibank.kernel.db import Database


db_app = OperatorApp(help="The database schema.")


@db_app.command("upgrade")
def db_upgrade(
    server_role: Annotated[
        str | None,
        typer.Option(
            metavar="ROLE",
            envvar="MULTIBANK_DATABASE_SERVER_ROLE",
            help="PostgreSQL: the role the server runs as (not the schema's owner, not a "
            "superuser). Grants it what the server needs and checks it cannot change postings, "
            "audit records, a transaction's details or an event's payload.",
        ),
    ] = None,
) -> None:
    """Create or update the database schema (apply every migration not applied yet).

    The only command besides `serve` that makes a database where there is none, and it says
    so: `database: PATH (...): none there yet, creating it` on stderr. Run it as the role that
    owns the schema. With --server-role (PostgreSQL), the server's own role is then granted
    what the server needs, and checked; exits 1 when it has more."""
    from multibank.kernel.migrate import RoleProblem, current_revision, grant_server_role, upgrade

    settings = load_settings()
    if server_role and settings.is_sqlite:
        fail("--server-role is for PostgreSQL: a SQLite database has no roles", CANNOT_START)
    _, path = database_said(settings)

    async def work(db: Database) -> None:
        # A new SQLite file is said as it is made; a PostgreSQL database may exist and be empty.
        if path is None and await current_revision(db) is None:
            typer.echo("the database holds no schema yet: creating it", err=True)
        await upgrade(db)
        if server_role:
            await grant_server_role(db, server_role)

    try:
        run(work, settings, creates=True)
    except RoleProblem as exc:
        fail(f"db upgrade: {exc}")
    typer.echo("database is up to date")
    if server_role:
        typer.echo(
            f"role {server_role}: granted what the server needs; it cannot update, delete or "
            "truncate postings or audit records, change a transaction's details or an event's "
            "payload, alter a table or create one"
        )
