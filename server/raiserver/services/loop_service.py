"""What every background loop shares: a pass made in a thread (never on the event loop), by one
server process at a time (a Redis lock), again every ``interval`` or sooner when woken, a failed
pass logged and tried again (the database or Redis may be restarting)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from contextlib import contextmanager

from fastapi.concurrency import run_in_threadpool

from raiserver.parts import AppServices
from raiserver.store.db import AWAY_TYPES, away
from raiserver.store.redis_keys import process_lock
from raiserver.store.redisconn import REDIS_AWAY

log = logging.getLogger("raiserver")


@contextmanager
def one_process_at_a_time(svc: AppServices, name: str, timeout: int) -> Iterator[bool]:
    """A Redis lock across every server process: yields whether this one holds it."""
    lock = svc.redis.sync.lock(process_lock(name), timeout=timeout, blocking=False)
    if not lock.acquire():
        yield False
        return
    try:
        yield True
    finally:
        with contextlib.suppress(Exception):  # expired under a very slow pass: harmless
            lock.release()


def outage(error: Exception) -> bool:
    """The database or Redis out of reach: passing, as the API's 503 says (api/errors.py)."""
    return isinstance(error, REDIS_AWAY) or (isinstance(error, AWAY_TYPES) and away(error))


class LoopService:
    """A loop of passes. ``run_once`` is one pass, in a thread; ``interval`` the longest wait
    between passes; ``wake`` (optional) starts the next pass at once; ``first_after`` (optional)
    how soon after the start the first pass runs."""

    name = "loop"
    queue_lane = False  # True: its passes run in the queue's lane (store/lane.py), its sessions from the lane's pool

    def __init__(self, svc: AppServices, interval: float, wake: asyncio.Event | None = None, first_after: float | None = None) -> None:
        self.svc, self.interval, self.wake = (svc.in_lane() if self.queue_lane else svc), interval, wake
        self.first_after = first_after  # the first pass this long after the start (None: after ``interval``)

    def run_once(self) -> object:
        raise NotImplementedError

    async def _wait(self) -> None:
        if self.wake is None:
            await asyncio.sleep(self.interval)
            return
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.wake.wait(), timeout=self.interval)
        self.wake.clear()

    async def start(self) -> None:
        if self.first_after is not None:
            await asyncio.sleep(self.first_after)
        else:
            await self._wait()
        while True:
            try:
                if self.queue_lane:
                    await self.svc.queue_lane.run(self.run_once)
                else:
                    await run_in_threadpool(self.run_once)
            except Exception as e:  # keep going whatever one pass hit
                if outage(e):  # the database or Redis away: one line a pass, not a traceback
                    log.warning("%s pass skipped: %s", self.name, str(e).split("\n", 1)[0])
                else:
                    log.exception("%s pass failed", self.name)
            await self._wait()
