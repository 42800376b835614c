"""The `multibank` command: serve, db, programme, ledger, audit, webhooks, sandbox. Every operator
action calls the same services as the operator API, so the two never disagree.

`serve`, `info` and `admin-token` are each in a module of their own, and so is each group moved
out yet (`multibank.cli.db`, `.programme`, `.ledger`, `.audit`); what the commands share is in
`multibank.cli.common`; this module builds the root app from them."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from typing import TYPE_CHECKING, Annotated

import typer

from multibank.cli import admin_token, audit, db, info, ledger, programme, serve
from multibank.cli.common import (
    DEFAULT_PROGRAMME,
    OperatorApp,
    admin_token_source,
    ensure_default_programme,
    fail,
    load_settings,
    loading_the_server,
    run,
)
from multibank.kernel.clock import Clock
from multibank.kernel.errors import Conflict, NotFound

# The server's modules (SQLAlchemy and the models, pydantic's schemas and settings, uvicorn, the
# FastAPI app) are imported inside the commands that use them, never here: `multibank --help`
# and every command's `--help` load typer alone and wait for none of the server (decision 0050;
# tests/test_cli_help.py checks that importing this package loads none of them). The
# helpers the commands share are in `multibank.cli.common`.
if TYPE_CHECKING:
    from multibank.kernel.db import Database


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
webhooks_app = OperatorApp(help="Webhook events: receive them locally, or deliver them.")
app.add_typer(webhooks_app, name="webhooks")
sandbox_app = OperatorApp(help="Sandbox helpers: ready-made test data.")
app.add_typer(sandbox_app, name="sandbox")
cards_app = OperatorApp(help="Managed cards: the card pool.")
app.add_typer(cards_app, name="cards")
pool_app = OperatorApp(help="The card pool: unassigned prepaid cards that identities claim.")
cards_app.add_typer(pool_app, name="pool")


@webhooks_app.command("listen")
def webhooks_listen(
    programme: Annotated[
        str,
        typer.Option(metavar="NAME", help="The programme (its name) whose events to receive."),
    ] = DEFAULT_PROGRAMME,
    port: Annotated[
        int,
        typer.Option(
            min=0, max=65535, metavar="PORT", help="TCP port to receive on (0: any free one)."
        ),
    ] = 8787,
    host: Annotated[
        str,
        typer.Option(metavar="HOST", help="Interface to receive on; the webhook URL names it."),
    ] = "127.0.0.1",
    forward_to: Annotated[
        str | None,
        typer.Option(
            "--forward-to",
            metavar="URL",
            help="Also send each event, headers and signatures as they came, to URL + its path "
            "(your app), and print its status.",
        ),
    ] = None,
) -> None:
    """Receive a programme's webhook events here and print them.

    Points the programme's webhook URL at a receiver started now, and prints each event as it
    arrives: time, event id (for `webhooks replay`), path, event type, resource id, and whether
    both of its signatures verify. With --forward-to, the server gets your app's answer, as it
    would without the listener. Ctrl-C puts the previous webhook URL back."""
    from multibank.webhooks.listen import ListenError, forward_target, listen

    try:
        if forward_to is not None:
            forward_target(forward_to)  # said before anything is opened
    except ListenError as exc:
        fail(str(exc))

    async def work(db: Database) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await listen(db, programme, host, port, typer.echo, stop, forward_to)

    try:
        run(work)
    except NotFound as exc:
        fail(exc.message)
    except ListenError as exc:
        fail(str(exc))


@webhooks_app.command("deliver")
def webhooks_deliver() -> None:
    """Deliver webhook events from this process, without serving the API.

    Run it beside API processes started with MULTIBANK_WEBHOOKS_POLL_SECONDS=0, so sending
    events never takes their CPU. Any number may run at once; Ctrl-C stops it."""
    from multibank.webhooks.delivery import WebhookWorker

    settings = load_settings()

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

    run(work, settings)


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


@webhooks_app.command("trigger")
def webhooks_trigger(
    event: Annotated[
        str,
        typer.Argument(
            metavar="EVENT", help="The event type, e.g. managed_accounts.CREATED (see --list)."
        ),
    ] = "",
    programme: Annotated[
        str, typer.Option(metavar="NAME", help="The sandbox programme (its name).")
    ] = DEFAULT_PROGRAMME,
    listed: Annotated[
        bool, typer.Option("--list", help="List the event types that can be triggered.")
    ] = False,
) -> None:
    """Make one real event of a type happen in a sandbox programme.

    Drives the API in this process with new sandbox customers: what the event needs (a
    customer, an account, a card) is made without events, then the action that causes it.
    Prints the new event's id; on stderr, any other event it cannot happen without (a block
    before an unblock, an authorisation before its settlement). They are delivered to the
    programme's webhook URL by the process that delivers events (`multibank serve`,
    `multibank webhooks deliver`)."""
    with loading_the_server():
        from multibank.audit import service as audit
        from multibank.devloop.trigger import TRIGGERS, TriggerError, trigger

    if listed or not event:
        typer.echo("\n".join(sorted(TRIGGERS)))
        if not listed:
            fail("name an EVENT (one of the above)")
        return
    settings = load_settings()

    try:
        done = run(lambda db: trigger(db, settings, programme, event), settings)
        ids = ", ".join(map(str, done.event_ids + [i for i, _ in done.others]))
        run(
            lambda db: audit.record_cli(
                db, Clock().system_ms(), "webhook.trigger", programme, note=f"{event}: {ids}"
            ),
            settings,
            again=True,
        )
    except NotFound as exc:
        fail(exc.message)
        return
    except TriggerError as exc:
        fail(f"cannot trigger {event} in programme {programme!r}: {exc}")
        return
    for event_id in done.event_ids:
        typer.echo(f"{event_id}\t{event}")
    if done.others:
        typer.echo("with it, as it cannot happen without them:", err=True)
        for event_id, kind in done.others:
            typer.echo(f"  {event_id}\t{kind}", err=True)


@webhooks_app.command("replay")
def webhooks_replay(
    event_id: Annotated[
        str,
        typer.Argument(
            metavar="EVENT_ID",
            help="The stored event's id, or its call-ref (as a receiver saw it).",
        ),
    ],
    to: Annotated[
        str | None,
        typer.Option(
            "--to",
            metavar="URL",
            help="Base URL to send it to instead of the programme's (e.g. a listener's).",
        ),
    ] = None,
) -> None:
    """Send a stored webhook event again, with the same call-ref, signed as delivery signs.

    Takes the event id `webhooks listen` prints (and the portal copies), or the event's call-ref.

    Goes to the programme's webhook URL (or --to) plus the event's path; prints the answer's
    status. The event's delivery state does not change."""
    from multibank.audit import service as audit
    from multibank.devloop.replay import ReplayError, replay

    settings = load_settings()
    try:
        done = run(lambda db: replay(db, event_id, to, settings.webhooks_allow_private), settings)
    except NotFound as exc:
        fail(exc.message)
        return
    except ReplayError as exc:
        fail(f"cannot replay event {event_id}: {exc}")
        return
    result = done.result
    said = f"HTTP {result.status}" if result.status is not None else (result.error or "?")
    line = f"event {done.event_id} {done.event_type} call-ref {done.call_ref} -> {done.url}: {said}"
    replayed = audit.Target("webhook_event", str(done.event_id))
    run(
        lambda db: audit.record_cli(
            db, Clock().system_ms(), "webhook_event.replay", None, done.event_id, replayed, said
        ),
        settings,
        again=True,
    )
    if not result.delivered:
        fail(f"replay not accepted: {line}")
    typer.echo(line)


clock_app = OperatorApp(
    help="A sandbox programme's clock, like Stripe's test clocks: show it, move it on."
)
app.add_typer(clock_app, name="clock")


CLOCK_FORMAT = "%Y-%m-%d %H:%M:%S"


def _ahead(offset_ms: int) -> str:
    """`3d 2h 5m ahead of real time`, or `real time`."""
    seconds = offset_ms // 1000
    if seconds <= 0:
        return "real time"
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, seconds = divmod(rest, 60)
    parts = [f"{n}{unit}" for n, unit in ((days, "d"), (hours, "h"), (minutes, "m")) if n]
    return f"{' '.join(parts or [f'{seconds}s'])} ahead of real time"


def _clock_line(name: str, now_ms: int, offset_ms: int) -> str:
    from datetime import UTC, datetime

    when = datetime.fromtimestamp(now_ms / 1000, UTC).strftime(CLOCK_FORMAT)
    return f"programme {name}: {when} UTC ({_ahead(offset_ms)})"


@clock_app.command("show")
def clock_show(
    programme: Annotated[
        str, typer.Option(metavar="NAME", help="The programme (its name).")
    ] = DEFAULT_PROGRAMME,
) -> None:
    """Show the programme's clock (UTC) and how far ahead of real time it runs."""
    from multibank.programmes import service

    async def work(db: Database) -> tuple[int, int]:
        async with db.transaction() as session:
            found = await service.require_programme_by_name(session, programme)
            return Clock().now_ms(found.clock_offset_ms), found.clock_offset_ms

    try:
        now, offset = run(work)
    except NotFound as exc:
        fail(exc.message)
        return
    typer.echo(_clock_line(programme, now, offset))


@clock_app.command("advance")
def clock_advance(
    step: Annotated[
        str,
        typer.Argument(
            metavar="STEP",
            help="How far: 1d, 2h, 30m, 45s (or several, as 1d12h), or a date or time to move "
            "to, as 2027-01-31 or 2027-01-31T09:00 (UTC unless it says).",
        ),
    ],
    programme: Annotated[
        str, typer.Option(metavar="NAME", help="The sandbox programme (its name).")
    ] = DEFAULT_PROGRAMME,
) -> None:
    """Move a sandbox programme's clock on; it never runs back.

    What the new time makes due happens before the command ends, as the simulator's clock
    advance does it: payment challenges expire, wire transfers and IBAN allocations complete,
    cards expire or renew. At most 10 years a step, 100 years ahead of real time in all."""
    from pydantic import ValidationError

    from multibank.audit import service as audit
    from multibank.cards import clock as card_clock
    from multibank.kernel.durations import parse
    from multibank.payments import steps as payment_steps
    from multibank.programmes import service
    from multibank.simulator.router import ClockAdvance

    try:
        wanted = parse(step)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'STEP'") from None

    async def work(db: Database) -> tuple[int, int]:
        clock = Clock()
        async with db.transaction() as session:
            found = await service.require_programme_by_name(session, programme)
            if found.mode != "sandbox":
                raise ClockRefused(f"it is a {found.mode} programme; only a sandbox's clock moves")
            seconds = wanted.seconds_from(clock.now_ms(found.clock_offset_ms))
            if seconds <= 0:
                raise ClockRefused("that time has passed on its clock, which never runs back")
            body = ClockAdvance(seconds=seconds)
            before = await audit.snapshot(session, found.id)
            offset = await service.advance_clock(session, found, body.seconds)
            await audit.record_change(
                session, clock.system_ms(), audit.CLI, "clock.advance", found.id, before
            )
            pid = found.id
        # The new time is committed alone, first; then each due step in a transaction of its own.
        await payment_steps.catch_up(db, clock, pid)
        await card_clock.catch_up(db, clock, pid)
        return clock.now_ms(offset), offset

    try:
        now, offset = run(work)
    except NotFound as exc:
        fail(exc.message)
        return
    except ClockRefused as exc:
        fail(f"cannot move the clock of programme {programme!r}: {exc}")
        return
    except ValidationError:
        fail(f"cannot move the clock of programme {programme!r}: at most 10 years a step")
        return
    except Conflict as exc:
        fail(f"cannot move the clock of programme {programme!r}: {exc.error_code} ({exc.message})")
        return
    typer.echo(_clock_line(programme, now, offset))


class ClockRefused(Exception):
    """Why a programme's clock was not moved, in one line."""


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
