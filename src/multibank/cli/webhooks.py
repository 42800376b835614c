"""`multibank webhooks`: receive a programme's events here, deliver them, make one happen, send
one again."""

from __future__ import annotations

import asyncio
import signal
from typing import TYPE_CHECKING, Annotated

import typer

from multibank.cli.common import (
    DEFAULT_PROGRAMME,
    OperatorApp,
    fail,
    load_settings,
    loading_the_server,
    run,
)
from multibank.kernel.clock import Clock
from multibank.kernel.errors import NotFound

if TYPE_CHECKING:
    from multibank.kernel.db import Database


webhooks_app = OperatorApp(help="Webhook events: receive them locally, or deliver them.")


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
    from multibank.devloop.listen import ListenError, forward_target, listen

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


# The developer loop (issue 35, decision 0051): `trigger` and `replay` do their work in
# `multibank.devloop`, imported when the command runs.


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
