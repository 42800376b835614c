"""The background loop a server process runs for a job (started and stopped by the app's
lifespan): a round every `interval` seconds, or at once again while a round says more may be
waiting. A failing round is logged and tried again next time: the database may be away."""

from __future__ import annotations

import asyncio
import contextlib
import logging


class PeriodicWorker:
    name = "multibank-worker"

    def __init__(self, interval: float, log: logging.Logger) -> None:
        self.interval = interval
        self.log = log
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def round(self) -> bool:
        """One round of the job; True when more work may be waiting now."""
        raise NotImplementedError

    def start(self) -> None:
        if self._task is None:
            self._stop.clear()
            self._task = asyncio.create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        self._stop.set()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def _run(self) -> None:
        while not self._stop.is_set():
            more = False
            try:
                more = await self.round()
            except Exception:
                self.log.exception("%s round failed", self.name)
            if more:
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.interval)
