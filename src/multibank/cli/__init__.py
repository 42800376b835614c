"""The `multibank` command: serve, db, programme, ledger, audit, webhooks, sandbox. Every operator
action calls the same services as the operator API, so the two never disagree.

One module per command group (`multibank.cli.db`, `.programme`, `.webhooks`, …; `serve`, `info`
and `admin-token` each in a module of its own), what they share in `multibank.cli.common`; this
module builds the root app from them."""

from __future__ import annotations

import sys

import typer

from multibank.cli import (
    admin_token,
    audit,
    cards,
    clock,
    db,
    info,
    ledger,
    programme,
    sandbox,
    serve,
    webhooks,
)
from multibank.cli.common import OperatorApp, ensure_default_programme, loading_the_server

# The server's modules (SQLAlchemy and the models, pydantic's schemas and settings, uvicorn, the
# FastAPI app) are imported inside the commands that use them, never at the top of a module of
# this package: `multibank --help` and every command's `--help` load typer alone and wait for
# none of the server (decision 0050; tests/test_cli_help.py checks that importing this package
# loads none of them).

__all__ = ["app", "ensure_default_programme", "loading_the_server", "main"]

app = OperatorApp(
    help="multibank: a self-hostable Multi Product Banking Service server.",
    epilog="First steps: `multibank serve`, then `multibank sandbox seed` in another terminal "
    "for a ready-made corporate and consumer to try the API with.",
)
# Listed in `multibank --help` in this order: the commands, then the groups.
app.command()(serve.serve)
app.command("admin-token")(admin_token.admin_token)
app.command()(info.info)
app.add_typer(db.db_app, name="db")
app.add_typer(programme.programme_app, name="programme")
app.add_typer(ledger.ledger_app, name="ledger")
app.add_typer(audit.audit_app, name="audit")
app.add_typer(webhooks.webhooks_app, name="webhooks")
app.add_typer(sandbox.sandbox_app, name="sandbox")
app.add_typer(cards.cards_app, name="cards")
app.add_typer(clock.clock_app, name="clock")


def main() -> None:
    try:
        app()
    except Exception as exc:
        from pydantic import ValidationError  # loaded already: a refused setting raised it

        if not isinstance(exc, ValidationError) or exc.title != "Settings":
            raise
        # A setting the server refuses (live mode's secrets among them) is one line, not a
        # traceback: the operator has one thing to fix.
        said = "; ".join(str(e.get("ctx", {}).get("error") or e["msg"]) for e in exc.errors())
        typer.echo(f"multibank: invalid settings: {said}", err=True)
        sys.exit(2)
