"""Id nodes leased from the database (issue 10): processes started together on one database hold
distinct nodes, so their ids cannot collide; a released node is free again; a dead process's
node is taken over once its lease has run out, and the dead holder can no longer renew it."""

from __future__ import annotations

import asyncio
import os
import sys
import time

import pytest
from sqlalchemy import select

from multibank.container import Container
from multibank.kernel.db import Database
from multibank.kernel.ids import IdGenerator
from multibank.kernel.node_lease import LEASE_MS, NodeLease, acquire, release, renew

HOLDER = """
import asyncio, os, sys
from multibank.kernel import ids
from multibank.kernel.clock import Clock
from multibank.kernel.db import Database
from multibank.kernel.node_lease import NodeKeeper

async def main() -> None:
    db = Database(sys.argv[1])
    keeper = NodeKeeper(db, Clock())
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.readline)  # "go": all start at once
    node = await keeper.start(renew_in_background=False)
    first = ids.new_id()
    print(node, keeper.holder, first, flush=True)
    order = (await loop.run_in_executor(None, sys.stdin.readline)).strip()
    if order == "release":
        await keeper.stop()
        await db.dispose()
        print("released", flush=True)
    else:  # die holding the lease, as a killed process does
        os._exit(0)

asyncio.run(main())
"""

PROCESSES = 4


async def _start_holders(url: str) -> list[asyncio.subprocess.Process]:
    env = {k: v for k, v in os.environ.items() if k != "MULTIBANK_NODE_ID"}
    return [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            HOLDER,
            url,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env=env,
        )
        for _ in range(PROCESSES)
    ]


async def _say(proc: asyncio.subprocess.Process, line: str) -> None:
    assert proc.stdin is not None
    proc.stdin.write(line.encode() + b"\n")
    await proc.stdin.drain()


async def _hear(proc: asyncio.subprocess.Process) -> str:
    assert proc.stdout is not None
    return (await asyncio.wait_for(proc.stdout.readline(), 60)).decode().strip()


async def test_processes_started_together_hold_distinct_nodes(container: Container) -> None:
    database_url = container.settings.database_url
    procs = await _start_holders(database_url)
    try:
        for p in procs:
            await _say(p, "go")
        heard = [(await _hear(p)).split() for p in procs]
        nodes = [int(h[0]) for h in heard]
        holders = [h[1] for h in heard]
        first_ids = [int(h[2]) for h in heard]
        assert len(set(nodes)) == PROCESSES, nodes
        # Each id carries its process's leased node in bits 12..21.
        assert [(i >> 12) & 1023 for i in first_ids] == nodes
        db = Database(database_url)
        try:
            async with db.transaction() as s:
                rows = {
                    r.node_id: r
                    for r in (
                        await s.execute(select(NodeLease).where(NodeLease.node_id.in_(nodes)))
                    ).scalars()
                }
            now = int(time.time() * 1000)
            for node, holder in zip(nodes, holders, strict=True):
                assert rows[node].holder == holder
                assert rows[node].expires_at > now
            # While they hold their nodes, nobody else can take one of them.
            mine = await acquire(db, "onlooker", now)
            try:
                assert mine not in nodes
            finally:
                await release(db, mine, "onlooker")

            # One stops cleanly and releases its node: it is free at once, and it is the
            # lowest free node (each holder took the lowest free one when it started).
            await _say(procs[0], "release")
            assert await _hear(procs[0]) == "released"
            assert await procs[0].wait() == 0
            again = await acquire(db, "successor", int(time.time() * 1000))
            assert again == nodes[0]
            await release(db, again, "successor")

            # The others die holding theirs: the nodes stay taken until the leases run out ...
            for p in procs[1:]:
                await _say(p, "die")
                await p.wait()
            later = int(time.time() * 1000) + LEASE_MS + 1
            dead = dict(zip(nodes[1:], holders[1:], strict=True))
            inherited: list[int] = []
            try:
                # ... then they are taken over (lowest first), and a dead holder that wakes up
                # cannot renew the node it lost.
                while not set(dead) <= set(inherited):
                    inherited.append(await acquire(db, "heir", later))
                for node, holder in dead.items():
                    assert not await renew(db, node, holder, later)
                    assert await renew(db, node, "heir", later)
            finally:
                for node in inherited:
                    await release(db, node, "heir")
        finally:
            await db.dispose()
    finally:
        for p in procs:
            if p.returncode is None:
                p.kill()
                await p.wait()


async def test_a_node_is_not_taken_twice_by_one_instant(container: Container) -> None:
    """Acquirers racing in one process: the compare-and-set gives each its own node."""
    database_url = container.settings.database_url
    db = Database(database_url)
    try:
        now = int(time.time() * 1000)
        got = await asyncio.gather(*(acquire(db, f"racer-{i}", now) for i in range(6)))
        assert len(set(got)) == 6, got
        for i, node in enumerate(got):
            assert not await renew(db, node, "someone-else", now)
            await release(db, node, f"racer-{i}")
    finally:
        await db.dispose()


def test_ids_stop_when_the_lease_has_run_out() -> None:
    gen = IdGenerator(node_id=5)
    gen.use_node(6, int(time.time() * 1000) + 60_000)
    assert (gen.next_int() >> 12) & 1023 == 6
    gen.use_node(6, int(time.time() * 1000) - 1)
    with pytest.raises(RuntimeError, match="lease of id node 6 has expired"):
        gen.next_int()
