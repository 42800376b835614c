"""`multibank admin-token`: the admin token of the operator API and the portal."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from multibank.cli.common import ADMIN_TOKEN_FROM_ENV, fail, load_settings, run
from multibank.kernel.clock import Clock

if TYPE_CHECKING:
    from multibank.kernel.db import Database


def admin_token(
    rotate: Annotated[
        bool,
        typer.Option(
            "--rotate",
            help="Make a new admin token: the old one, and portal sessions signed in with it, "
            "stop working (in a sandbox, within a second on every running server).",
        ),
    ] = False,
) -> None:
    """Show the admin token of the operator API and the portal (sandbox), or make a new one.

    A sandbox generates its own on first start and keeps it in the database: this prints it
    (stdout holds the token alone). When MULTIBANK_ADMIN_TOKEN sets it (always, in live mode),
    `--rotate` prints a new value to put there; a live token is never shown (decision 0067)."""
    from multibank.audit import service as audit
    from multibank.kernel import secrets as server_secrets

    settings = load_settings()
    if settings.admin_token:
        if not rotate:
            if settings.mode == "live":
                fail(
                    "a live server's admin token is MULTIBANK_ADMIN_TOKEN's value, which this "
                    "command never shows; `multibank admin-token --rotate` makes a new one"
                )
            typer.echo(f"admin token: {ADMIN_TOKEN_FROM_ENV}", err=True)
            typer.echo(settings.admin_token)
            return
        typer.echo(
            "admin token: set MULTIBANK_ADMIN_TOKEN to this new value in the environment of "
            "every server process and restart them; the old one works until then",
            err=True,
        )
        typer.echo(server_secrets.new_admin_token())
        return

    async def work(db: Database) -> tuple[str, str]:
        now = Clock().system_ms()
        if not rotate:
            token, created = await server_secrets.admin_token(db, None, now)
            if created:
                return token, "generated now, kept in the database; `multibank serve` uses it"
            return token, "kept in the database (generated on the first start)"
        token = server_secrets.new_admin_token()
        async with db.transaction() as session:
            await server_secrets.replace_admin_token(session, token, now)
            await audit.record(session, now, audit.CLI, "admin_token.rotate")
        return token, (
            "rotated: running servers take the new one within a second; the old one and the "
            "portal sessions signed in with it no longer work"
        )

    token, said = run(work, settings)
    typer.echo(f"admin token: {said}", err=True)
    typer.echo(token)
