"""`multibank cards`: managed cards, the card pool."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer

from multibank.cli.common import DEFAULT_PROGRAMME, OperatorApp, fail, load_settings, run
from multibank.kernel.clock import Clock
from multibank.kernel.errors import Conflict, NotFound

if TYPE_CHECKING:
    from multibank.kernel.db import Database


cards_app = OperatorApp(help="Managed cards: the card pool.")
pool_app = OperatorApp(help="The card pool: unassigned prepaid cards that identities claim.")
cards_app.add_typer(pool_app, name="pool")


# Over 80 lines: typer reads the command's options, with their help, from its signature.
@pool_app.command("create")
def cards_pool_create(
    profile: Annotated[
        str,
        typer.Option(
            "--profile", metavar="ID", help="A prepaid card profile of the programme (its id)."
        ),
    ],
    count: Annotated[
        int,
        typer.Option("--count", min=1, max=1000, metavar="N", help="How many cards to create."),
    ],
    programme: Annotated[
        str, typer.Option("--programme", metavar="NAME", help="The programme (its name).")
    ] = DEFAULT_PROGRAMME,
    physical: Annotated[
        bool,
        typer.Option("--physical", help="Physical cards, already activated."),
    ] = False,
    currency: Annotated[
        str | None,
        typer.Option(
            "--currency", metavar="CURRENCY", help="ISO-4217 code (default: the profile's first)."
        ),
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option("--json", help="Print the cards as one JSON list of objects."),
    ] = False,
) -> None:
    """Create unassigned prepaid cards in a programme's card pool.

    Prints each card's external reference and activation code, one card a line; the codes are
    shown now only. An identity of the profile's type claims a card with both
    (`POST /managed_cards/assign`)."""
    from multibank.audit import service as audit
    from multibank.cards.pool import create_pool
    from multibank.kernel import secrets as server_secrets
    from multibank.kernel.carddata import CardKeyring
    from multibank.kernel.node_lease import NodeKeeper
    from multibank.programmes import service
    from multibank.programmes.context import Ctx

    settings = load_settings()

    async def work(db: Database) -> list[tuple[str, str]]:
        nodes = NodeKeeper(db, Clock())
        await nodes.start(renew_in_background=False)
        try:
            clock = Clock()
            data_keys, verification_key = await server_secrets.card_keys(
                db, settings.card_data_key, settings.card_verification_key, clock.system_ms()
            )
            keys = CardKeyring(data_keys, verification_key)
            async with db.transaction() as session:
                found = await service.require_programme_by_name(session, programme)
                ctx = Ctx(session, found, clock.now_ms(found.clock_offset_ms))
                pool = audit.Target("card_pool", str(found.id))
                before = await audit.subject(session, found.id, pool)
                made = await create_pool(ctx, keys, profile, count, physical, currency)
                note = f"{len(made)} card(s) of profile {profile}"
                changes = audit.diff(before, await audit.subject(session, found.id, pool))
                await audit.record(
                    session,
                    clock.system_ms(),
                    audit.CLI,
                    "card_pool.create",
                    found.id,
                    pool,
                    changes,
                    note,
                )
                return made
        finally:
            await nodes.stop()

    try:
        made = run(work, settings)
    except NotFound as exc:
        fail(exc.message)
        return
    except Conflict as exc:
        reason = f"{exc.error_code} ({exc.message})" if exc.message else exc.error_code
        fail(f"cannot create pool cards: {reason}")
        return
    if as_json:
        cards = [{"externalReference": r, "activationCode": c} for r, c in made]
        typer.echo(json.dumps(cards))
        return
    for reference, code in made:
        typer.echo(f"{reference}\t{code}")
