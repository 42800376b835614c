"""`multibank clock`: a sandbox programme's clock."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from multibank.cli.common import DEFAULT_PROGRAMME, OperatorApp, fail, run
from multibank.kernel.clock import Clock
from multibank.kernel.errors import Conflict, NotFound

if TYPE_CHECKING:
    from multibank.kernel.db import Database


clock_app = OperatorApp(
    help="A sandbox programme's clock, like Stripe's test clocks: show it, move it on."
)
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

    from multibank import due_work
    from multibank.audit import service as audit
    from multibank.kernel.durations import parse
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
        await due_work.catch_up(db, clock, pid)
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
