"""A sandbox programme's clock, moved on by a form of its page: the simulator's own body and
service (the same bounds, the same refusals); once the new time is committed, what fell due by
then runs, as after the simulator's clock/advance."""

from __future__ import annotations

from functools import partial

from fastapi import Request

from multibank import due_work
from multibank.api.routing import after_commit, container_of
from multibank.kernel import durations
from multibank.portal.web.actions import Flash, programme_form
from multibank.portal.web.common import db_of, portal_router, when
from multibank.portal.web.forms import Refused, whole
from multibank.programmes import service
from multibank.programmes.models import Programme
from multibank.simulator.router import ClockAdvance

pages = portal_router()


@programme_form(pages, "clock", sandbox_only=True)
async def clock_advance(request: Request, form: dict[str, str], programme: Programme) -> Flash:
    container = container_of(request)
    # The simulator's own body and service: the same bounds, the same refusals. `by` takes what
    # `multibank clock advance` takes; `seconds`, a whole number, is the earlier form's.
    if "by" in form:
        try:
            wanted = durations.parse(form["by"])
        except ValueError as exc:
            raise Refused(f"{exc}.") from None
        seconds = wanted.seconds_from(container.clock.now_ms(programme.clock_offset_ms))
        if seconds <= 0:
            raise Refused("That time has passed on the programme's clock, which never runs back.")
    else:
        seconds = whole(form.get("seconds"), "The number of seconds")
    body = ClockAdvance(seconds=seconds)
    db = db_of(request)
    offset = await service.advance_clock(db, programme, body.seconds)
    now = container.clock.now_ms(offset)
    # As the simulator's clock/advance: the new time commits alone, then each due step.
    after_commit(db, partial(due_work.catch_up, container.db, container.clock, programme.id))
    return Flash(f"The clock moved on to {when(now)} UTC.")
