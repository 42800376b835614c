"""The scheduler of due work (`programmes/due.py`, issue 42 §3), called as the worker and
`clock/advance` call it, in one transaction that is rolled back: a kind's rows are due by each
programme's own clock, `catch_up`'s query sees one programme only, and a row is taken once (the
claim re-checks that it is still due). IBAN allocations are the example: their delay is a
programme setting. The claim's `SKIP LOCKED` between processes is in tests/api/test_clock_race.py
and test_iban_processes.py."""

from __future__ import annotations

from sqlalchemy.dialects import postgresql

from multibank import due_work
from multibank.accounts import service as accounts
from multibank.accounts.models import ManagedAccount
from multibank.container import Container
from multibank.kernel.clock import Clock
from multibank.payments.steps import IBANS
from multibank.programmes.context import Ctx
from tests import domain_factories as make
from tests.domain_factories import rolled_back


class Later(Clock):
    """The server's clock `seconds` ahead."""

    def __init__(self, seconds: int) -> None:
        super().__init__()
        self.seconds = seconds

    def system_ms(self) -> int:
        return super().system_ms() + self.seconds * 1000


async def _requested(ctx: Ctx) -> int:
    """An account whose owner asked for an IBAN just now (the programme's delay is 60 s)."""
    owner = await make.customer(ctx)
    account = await make.account(ctx, owner)
    await accounts.upgrade_iban(ctx, owner.account_owner, str(account.id))
    assert account.iban_state == "PENDING_ALLOCATION"
    return account.id


async def _due(ctx: Ctx, clock: Clock, programme_id: int | None = None) -> set[int]:
    if programme_id is None:
        stmt, params = IBANS.due, {"now": clock.system_ms()}
    else:
        stmt = IBANS.due_in_programme
        params = {"now": clock.system_ms(), "programme_id": programme_id}
    return set((await ctx.db.execute(stmt, params)).scalars())


async def test_a_row_is_due_by_its_programmes_clock_and_taken_once(container: Container) -> None:
    async with rolled_back(container) as db:
        mine = await make.new_programme(db, container, ibanAllocationDelaySeconds=60)
        other = await make.new_programme(db, container, ibanAllocationDelaySeconds=60)
        asked, elsewhere = await _requested(mine), await _requested(other)

        assert {asked, elsewhere}.isdisjoint(await _due(mine, container.clock))
        ahead = Later(61)
        assert {asked, elsewhere} <= await _due(mine, ahead)
        # What `clock/advance` of one programme looks at: its own rows only.
        assert await _due(mine, ahead, mine.programme.id) == {asked}

        # Not due yet by the server's clock: the claim holds the row, the step declines.
        assert await IBANS.take(db, container.clock, asked) is False
        assert await IBANS.take(db, ahead, asked) is True
        account = await db.get(ManagedAccount, asked)
        assert account is not None and account.iban_state == "ALLOCATED"
        # Taken: no longer due, so neither the claim nor the queries find it again.
        assert await IBANS.take(db, ahead, asked) is False
        assert asked not in await _due(mine, ahead)


def test_every_kind_of_due_work_is_in_the_one_schedule() -> None:
    """The payment, IBAN and card steps: one list, one name each (`catch_up` keeps the rows it
    left by name), each claimed with `SKIP LOCKED`."""
    names = [work.name for work in due_work.WORK]
    assert names == [
        "payment",
        "IBAN allocation",
        "card manufacturing",
        "card lifecycle",
        "card authorisation expiry",
    ]
    for work in due_work.WORK:
        assert "SKIP LOCKED" in str(work.claim.compile(dialect=postgresql.dialect())), work.name
