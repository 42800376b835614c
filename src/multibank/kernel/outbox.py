"""Delivers live outbox messages through a notifier, safely from any number of processes (D9).

A message is pending while `deliver` is true, `delivered_at` is null, it has attempts left and
its `next_attempt_at` (if any) has come. Delivery runs in three short transactions, none of them
open while the network is used:

1. claim: take up to `limit` pending rows, count an attempt on each and lease them
   (`next_attempt_at = now + lease`) so no other process takes them meanwhile. On PostgreSQL the
   rows are read with `SELECT ... FOR UPDATE SKIP LOCKED`: concurrent claimers skip each other's
   rows instead of waiting. On SQLite every transaction holds the write lock (`BEGIN IMMEDIATE`),
   which serialises claimers across processes.
2. send each message through the notifier, outside any transaction;
3. mark it delivered, or, when the send raised, keep it pending with `last_error` and a back-off
   before the next attempt. After `max_attempts` the message is given up (kept, logged).

A process that dies between 1 and 3 leaves a lease that expires: the message is sent again by
whoever claims it next. Messages are therefore delivered at least once, never lost; a duplicate
needs a crash (or a send slower than the lease) in the middle of a send.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlalchemy import or_, select, update

from multibank.kernel.clock import Clock
from multibank.kernel.db import Database
from multibank.kernel.notify import Notifier, OutboxMessage

log = logging.getLogger("multibank.outbox")


@dataclass(frozen=True)
class DeliveryPolicy:
    max_attempts: int = 8
    # How long a claimed batch is reserved for the process sending it. It must exceed the time a
    # whole batch can take (batch size x SMTP timeout), or a slow batch may be sent twice.
    lease_ms: int = 5 * 60_000
    backoff_ms: int = 30_000  # after the first failure; doubled after each further one
    max_backoff_ms: int = 60 * 60_000

    def backoff(self, attempts: int) -> int:
        return int(min(self.backoff_ms * 2 ** max(0, attempts - 1), self.max_backoff_ms))


@dataclass(frozen=True)
class DeliveryReport:
    claimed: int = 0
    delivered: int = 0
    failed: int = 0
    released: int = 0


async def claim(
    db: Database, now_ms: int, limit: int, policy: DeliveryPolicy
) -> list[OutboxMessage]:
    """Takes up to `limit` pending messages for this caller alone, oldest first."""
    m = OutboxMessage
    query = (
        select(m)
        .where(
            m.deliver.is_(True),
            m.delivered_at.is_(None),
            m.attempts < policy.max_attempts,
            or_(m.next_attempt_at.is_(None), m.next_attempt_at <= now_ms),
        )
        .order_by(m.created_at, m.id)
        .limit(limit)
    )
    # Looked for first on a read session: an idle round (nearly every round) takes no write lock
    # and no transaction, which on SQLite are two hand-offs to a thread and the one writer.
    async with db.read_sessionmaker() as probe:
        if (await probe.execute(query.with_only_columns(m.id).limit(1))).first() is None:
            return []
    if not db.is_sqlite:
        query = query.with_for_update(skip_locked=True)
    async with db.transaction() as session:
        rows = list((await session.scalars(query)).all())
        for row in rows:  # under the row locks (PostgreSQL) or the write lock (SQLite)
            row.attempts += 1
            row.next_attempt_at = now_ms + policy.lease_ms
    return rows


async def _mark_delivered(db: Database, message: OutboxMessage, now_ms: int) -> None:
    async with db.transaction() as session:
        await session.execute(
            update(OutboxMessage)
            .where(OutboxMessage.id == message.id, OutboxMessage.delivered_at.is_(None))
            .values(delivered_at=now_ms, next_attempt_at=None, last_error=None)
        )


async def _mark_failed(
    db: Database, message: OutboxMessage, now_ms: int, error: BaseException, policy: DeliveryPolicy
) -> None:
    detail = f"{type(error).__name__}: {error}"[:500]
    async with db.transaction() as session:
        await session.execute(
            update(OutboxMessage)
            .where(OutboxMessage.id == message.id, OutboxMessage.delivered_at.is_(None))
            .values(next_attempt_at=now_ms + policy.backoff(message.attempts), last_error=detail)
        )
    gave_up = message.attempts >= policy.max_attempts
    log.log(
        logging.ERROR if gave_up else logging.WARNING,
        "outbox message given up" if gave_up else "outbox message not sent; will retry",
        extra={
            "message_id": str(message.id),
            "channel": message.channel,
            "attempts": message.attempts,
            "error": detail,
        },
    )


async def _release(db: Database, messages: Sequence[OutboxMessage]) -> None:
    """Hands claimed but unsent messages back at once (shutdown), with their attempt uncounted."""
    if not messages:
        return
    async with db.transaction() as session:
        await session.execute(
            update(OutboxMessage)
            .where(
                OutboxMessage.id.in_([msg.id for msg in messages]),
                OutboxMessage.delivered_at.is_(None),
            )
            .values(attempts=OutboxMessage.attempts - 1, next_attempt_at=None)
        )


async def deliver_pending(
    db: Database,
    notifier: Notifier,
    now_ms: int,
    limit: int = 20,
    *,
    policy: DeliveryPolicy | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> DeliveryReport:
    """Claims up to `limit` pending messages, sends them one by one and records each outcome.

    `should_stop` is asked before each send; once it answers True the rest of the batch is
    released for any process to take at once.
    """
    policy = policy or DeliveryPolicy()
    messages = await claim(db, now_ms, limit, policy)
    delivered = failed = 0
    for index, message in enumerate(messages):
        if should_stop is not None and should_stop():
            rest = messages[index:]
            await _release(db, rest)
            return DeliveryReport(len(messages), delivered, failed, len(rest))
        try:
            await notifier.send(message)
        except Exception as exc:  # any failure to send keeps the message for a later attempt
            failed += 1
            await _mark_failed(db, message, now_ms, exc, policy)
        else:
            delivered += 1
            await _mark_delivered(db, message, now_ms)
    return DeliveryReport(len(messages), delivered, failed)


class OutboxWorker:
    """The delivery loop one server process runs in the background (started by the app's
    lifespan): polls every `interval` seconds, or at once again while full batches come back."""

    def __init__(
        self,
        db: Database,
        notifier: Notifier,
        clock: Clock,
        *,
        interval: float = 1.0,
        batch: int = 20,
        policy: DeliveryPolicy | None = None,
    ) -> None:
        self.db = db
        self.notifier = notifier
        self.clock = clock
        self.interval = interval
        self.batch = batch
        self.policy = policy or DeliveryPolicy()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._stop.clear()
            self._task = asyncio.create_task(self._run(), name="multibank-outbox")

    async def stop(self, grace_seconds: float = 10.0) -> None:
        """Lets the current send finish (the rest of its batch is released), cancelling it only
        when that takes longer than `grace_seconds`."""
        task, self._task = self._task, None
        if task is None:
            return
        self._stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(task), grace_seconds)
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def run_once(self) -> DeliveryReport:
        return await deliver_pending(
            self.db,
            self.notifier,
            self.clock.system_ms(),
            self.batch,
            policy=self.policy,
            should_stop=self._stop.is_set,
        )

    async def _run(self) -> None:
        while not self._stop.is_set():
            full = False
            try:
                report = await self.run_once()
                full = report.claimed >= self.batch
            except Exception:  # the database may be away for a while; try again next round
                log.exception("outbox delivery round failed")
            if full:
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.interval)
