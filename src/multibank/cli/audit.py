"""`multibank audit`: the operator audit log."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from multibank.cli.common import OperatorApp, fail, run

if TYPE_CHECKING:
    from multibank.kernel.db import Database


audit_app = OperatorApp(help="The operator audit log.")


@audit_app.command("verify")
def audit_verify() -> None:
    """Check that the audit log's hash chain is whole; exits 1 at the first break.

    Each record carries the hash of the one before it: a record changed, removed or inserted
    outside the server breaks the chain there, and the first break is named. Prints the chain's
    head (its last record's seq and hash): keep it elsewhere to tell later that no record was
    removed from the end, nor the whole chain rewritten. Exits 2 when it cannot check."""
    from multibank.audit.chain import Verdict, verify

    async def work(db: Database) -> Verdict:
        async with db.transaction() as session:
            return await verify(session)

    verdict = run(work)
    row = verdict.broken_at
    if row is not None:
        typer.echo(
            f"audit verify: the chain breaks at record {row.id} (seq {row.seq}, "
            f"{row.action} by {row.actor} at {row.at}): {verdict.reason}",
            err=True,
        )
        fail(f"audit verify: broken after seq {verdict.head_seq}")
    typer.echo(
        f"audit verify: ok, {verdict.records} record(s); head seq {verdict.head_seq} "
        f"hash {verdict.head_hash}"
    )
