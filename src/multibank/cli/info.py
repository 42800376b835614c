"""`multibank info`: where things are (the database, the base URLs, the admin token)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from multibank.cli.common import (
    ADMIN_TOKEN_FROM_ENV,
    ADMIN_TOKEN_STORED,
    base_url_lines,
    database_said,
    load_settings,
)


def info(
    host: Annotated[
        str, typer.Option(metavar="HOST", help="The host `serve` listens on.")
    ] = "127.0.0.1",
    port: Annotated[
        int, typer.Option(min=1, max=65535, metavar="PORT", help="The port `serve` listens on.")
    ] = 8000,
) -> None:
    """Where things are: the database (and its state), the base URLs, the admin token's source.

    Reads the same settings as `serve` and every other command, so it tells which database
    they use from this folder; it never creates one."""
    from multibank.kernel import secrets as server_secrets
    from multibank.kernel.db import Database
    from multibank.kernel.migrate import current_revision, head_revision

    settings = load_settings()
    said, path = database_said(settings)

    async def state() -> tuple[str, bool]:
        """The database's state, and whether it holds a generated admin token."""
        db = Database(settings.database_url, settings.database_echo)
        try:
            revision = await current_revision(db)
            if revision is None:
                return "not migrated: run `multibank db upgrade`", False
            if revision != head_revision():
                return f"at {revision}: run `multibank db upgrade`", False
            async with db.sessionmaker() as session:
                stored = await server_secrets.read_secret(session, server_secrets.ADMIN_TOKEN)
            return f"ready (schema {revision})", stored is not None
        finally:
            await db.dispose()

    token_stored = False
    if path is not None and not Path(path).exists():
        now = "none there yet: `multibank serve` or `multibank db upgrade` creates it"
    else:
        from sqlalchemy.exc import SQLAlchemyError

        try:
            now, token_stored = asyncio.run(state())
        except (OSError, SQLAlchemyError) as exc:
            reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0][:200]
            now = f"cannot be used: {reason}"
    if settings.admin_token:
        token = ADMIN_TOKEN_FROM_ENV
    elif token_stored:
        token = ADMIN_TOKEN_STORED
    else:
        token = "none yet: `multibank serve` generates one on its first start"
    lines = [
        f"database: {said}",
        f"  {now}",
        "  (MULTIBANK_DATABASE_URL sets another: every command and `serve` read the same)",
        f"mode: {settings.mode}",
        f"base URLs (`multibank serve --host {host} --port {port}`):",
        *base_url_lines(f"http://{host}:{port}"),
        f"admin token: {token}",
    ]
    typer.echo("\n".join(lines))
