"""`multibank ledger`: the double-entry ledger."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from multibank.cli.common import CANNOT_START, OperatorApp, fail, run
from multibank.kernel.errors import NotFound

if TYPE_CHECKING:
    from multibank.kernel.db import Database


ledger_app = OperatorApp(help="The double-entry ledger.")


@ledger_app.command("verify")
def ledger_verify(
    programme: Annotated[
        str | None, typer.Option(metavar="NAME", help="Only this programme (its name).")
    ] = None,
) -> None:
    """Check that the ledger adds up; exits 1 on any violation.

    Every currency of every programme sums to zero, and every account's balance equals the sum
    of its postings. Exits 2 when it cannot check (no such programme, no database)."""
    from multibank.programmes import service
    from multibank.reconciliation import one_snapshot, verify

    async def work(db: Database) -> list[str]:
        async with db.transaction() as session:
            await one_snapshot(session)  # the programme's lookup is its first statement
            pid = None
            if programme is not None:
                pid = (await service.require_programme_by_name(session, programme)).id
            return [f"{v.what}: {v.detail}" for v in await verify(session, pid)]

    try:
        problems = run(work)
    except NotFound as exc:
        fail(exc.message, CANNOT_START)  # 1 says the ledger is broken
        return
    for line in problems:
        typer.echo(line, err=True)
    if problems:
        fail(f"ledger verify: {len(problems)} violation(s)")
    typer.echo("ledger verify: ok")
