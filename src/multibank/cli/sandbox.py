"""`multibank sandbox`: ready-made test data."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from multibank.cli.common import (
    DEFAULT_PROGRAMME,
    OperatorApp,
    admin_token_source,
    ensure_default_programme,
    fail,
    load_settings,
    run,
)
from multibank.kernel.clock import Clock
from multibank.kernel.errors import NotFound

if TYPE_CHECKING:
    from multibank.kernel.db import Database


sandbox_app = OperatorApp(help="Sandbox helpers: ready-made test data.")


# Over 80 lines: typer reads the command's options, with their help, from its signature.
@sandbox_app.command("seed")
def sandbox_seed(
    programme: Annotated[
        str,
        typer.Option(
            metavar="NAME",
            help="The sandbox programme (its name); `default` is created if missing.",
        ),
    ] = DEFAULT_PROGRAMME,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print everything as one JSON object.")
    ] = False,
) -> None:
    """Create a ready-to-use corporate and consumer in a sandbox programme.

    Each is verified, has an active SMS factor (every code is 123456) and a EUR account with an
    IBAN and 1000.00 EUR in it. Prints for each its e-mail, password, identity id, root user id,
    account id, IBAN and a fresh token, already stepped up (it lapses when unused for a while:
    log in again with the e-mail and password). Made through the API itself, on the configured
    database."""
    from multibank.audit import service as audit
    from multibank.kernel.node_lease import NodeKeeper
    from multibank.programmes import service
    from multibank.sandbox_seed import CURRENCY, DEPOSIT, Seeded, SeedError, seed

    settings = load_settings()

    async def work(db: Database) -> tuple[Seeded, str | None]:
        nodes = NodeKeeper(db, Clock())
        await nodes.start(renew_in_background=False)
        try:
            if programme == DEFAULT_PROGRAMME:
                await ensure_default_programme(db)
            async with db.transaction() as session:
                found = await service.require_programme_by_name(session, programme)
                mode = found.mode
                description = await service.describe(session, found)
        finally:
            await nodes.stop()
        if mode != "sandbox":
            raise SeedError(f"it is a {mode} programme; only sandbox programmes are seeded")
        seeded = await seed(settings, programme, description)
        # Money put in by an operator's command: in the audit log (issue 41 §5).
        for who in (seeded[0].corporate, seeded[0].consumer):
            await audit.record_cli(
                db,
                Clock().system_ms(),
                "account.deposit",
                programme,
                target=audit.Target("account", who.accountId),
                note=f"{DEPOSIT / 100:.2f} {CURRENCY} by sandbox seed (simulator deposit)",
            )
        return seeded

    try:
        seeded, admin_token = run(work, settings)
    except NotFound as exc:
        fail(exc.message)
        return
    except SeedError as exc:
        fail(f"cannot seed programme {programme!r}: {exc}")
        return
    shown_once = f"admin token: {admin_token_source(settings, admin_token)}"
    if as_json:
        if admin_token:
            typer.echo(shown_once, err=True)
        typer.echo(seeded.model_dump_json())
        return
    lines = [
        f"programme '{seeded.programme}': id {seeded.programmeId}",
        f"  api-key: {seeded.apiKey}",
    ]
    for kind, who in (("corporate", seeded.corporate), ("consumer", seeded.consumer)):
        lines += [
            kind,
            f"  e-mail:       {who.email}",
            f"  password:     {who.password}",
            f"  identity id:  {who.identityId}",
            f"  root user id: {who.rootUserId}",
            f"  account id:   {who.accountId} ({DEPOSIT / 100:.2f} {CURRENCY})",
            f"  IBAN:         {who.iban}",
            f"  token:        {who.token}",
        ]
    idle = settings.session_idle_seconds
    lapse = f"{idle // 60} minutes" if idle % 60 == 0 else f"{idle} seconds"
    lines += [
        f"Headers: `api-key: {seeded.apiKey}` and `Authorization: Bearer TOKEN`. Every one-time "
        "code is 123456.",
        f"A token lapses after {lapse} unused: log in again with the e-mail and password.",
    ]
    if admin_token:
        lines.append(shown_once)
    typer.echo("\n".join(lines))
