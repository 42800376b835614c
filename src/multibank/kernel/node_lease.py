"""Each process's id node (the 10 node bits of every id), leased from the database.

A node drawn at random is shared by two processes one time in 1024, and then their ids can
collide. Instead a process leases a free node: the row's lease is taken with a compare-and-set
on its expiry, so two processes never hold one node at the same time, on PostgreSQL or SQLite.
The lease is renewed in the background and released at shutdown; a process that could not
renew in time stops issuing ids (kernel/ids.py) rather than risk a node another has taken.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid

from sqlalchemy import BigInteger, Integer, String, select, update
from sqlalchemy.orm import Mapped, mapped_column

from multibank.kernel import ids
from multibank.kernel.clock import Clock
from multibank.kernel.db import Base, Database

log = logging.getLogger("multibank.ids")

LEASE_MS = 5 * 60_000  # a lease lasts five minutes ...
RENEW_SECONDS = 60.0  # ... and is renewed every minute


class NodeLease(Base):
    __tablename__ = "node_leases"

    node_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    holder: Mapped[str] = mapped_column(String(200))
    expires_at: Mapped[int] = mapped_column(BigInteger, index=True)


def _rows(result: object) -> int:
    return int(getattr(result, "rowcount", 0) or 0)


def holder_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"[:200]


async def acquire(db: Database, holder: str, now_ms: int) -> int:
    """Leases the lowest free node (never leased, expired, or released) for `holder`."""
    for _ in range(2048):
        async with db.transaction() as session:
            candidate = (
                await session.execute(
                    select(NodeLease.node_id)
                    .where(NodeLease.expires_at <= now_ms)
                    .order_by(NodeLease.node_id)
                    .limit(1)
                )
            ).scalar_one_or_none()
            if candidate is None:
                raise RuntimeError("every id node (1024) is leased: too many processes")
            taken = await session.execute(
                update(NodeLease)
                .where(NodeLease.node_id == candidate, NodeLease.expires_at <= now_ms)
                .values(holder=holder, expires_at=now_ms + LEASE_MS)
                .execution_options(synchronize_session=False)
            )
            if _rows(taken) == 1:
                return candidate
        # Another process took that node between our read and our write: try the next one.
    raise RuntimeError("could not lease an id node")


async def renew(db: Database, node_id: int, holder: str, now_ms: int) -> bool:
    async with db.transaction() as session:
        result = await session.execute(
            update(NodeLease)
            .where(NodeLease.node_id == node_id, NodeLease.holder == holder)
            .values(expires_at=now_ms + LEASE_MS)
            .execution_options(synchronize_session=False)
        )
        return _rows(result) == 1


async def release(db: Database, node_id: int, holder: str) -> None:
    async with db.transaction() as session:
        await session.execute(
            update(NodeLease)
            .where(NodeLease.node_id == node_id, NodeLease.holder == holder)
            .values(expires_at=0)
            .execution_options(synchronize_session=False)
        )


class NodeKeeper:
    """This process's lease: taken at start, renewed in the background, released at stop."""

    def __init__(self, db: Database, clock: Clock) -> None:
        self.db, self.clock = db, clock
        self.holder = holder_name()
        self.node_id: int | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self, renew_in_background: bool = True) -> int:
        now = self.clock.system_ms()
        self.node_id = await acquire(self.db, self.holder, now)
        ids.use_node(self.node_id, now + LEASE_MS)
        if renew_in_background:
            self._task = asyncio.create_task(self._renew_forever())
        return self.node_id

    async def _renew_forever(self) -> None:
        assert self.node_id is not None
        while True:
            await asyncio.sleep(RENEW_SECONDS)
            now = self.clock.system_ms()
            try:
                if await renew(self.db, self.node_id, self.holder, now):
                    ids.use_node(self.node_id, now + LEASE_MS)
                else:  # pragma: no cover - only if the row was taken after our lease expired
                    log.error("id node %s was taken by another process", self.node_id)
                    ids.use_node(self.node_id, 0)
            except Exception:
                log.exception("could not renew the lease of id node %s", self.node_id)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.node_id is not None:
            ids.end_lease()
            with contextlib.suppress(Exception):
                await release(self.db, self.node_id, self.holder)
