"""The queue's lane: threads and database connections of its own for what keeps jobs moving (the
workers' claims, state changes, leases, heartbeats and uploads; the release and reaper passes).

Every other sync route and dependency runs in anyio's default threads (40) and takes connections
from the process's pool (30). When students' requests outran one process (CI's slow machine,
``bench/fleet_sim.py`` at 5 submissions a second on 0.4 of a core), the workers' reports waited
behind them for a thread: a job held its slot in the database's eyes 3-4 s for a 2 s run, the slots
filled and the line grew before release (submit->released 25-31 s). Threads alone were not enough
(f9aeb4f, reverted): a request waiting for a thread may hold a connection an earlier step of it took,
and ~40 of them emptied the pool that the workers' lane needed too. Here the lane owns both: its own
limiter, its own small pool, and its own Redis connections (``AppServices.in_lane``: a student's
log streams read their backlog from Redis in the process's threads, past admission, and could hold
every connection of the process's pool while a claim waited up to 20 s for one), so nothing a student
sends can take any of them from it."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import anyio
import anyio.to_thread

from raiserver.store.db import Database
from raiserver.store.redisconn import RedisService

T = TypeVar("T")

QUEUE_THREADS = 6  # a claim or a state change is a few milliseconds; the release pass holds one


class Lane:
    """``await lane.run(fn, ...)``: ``fn`` in one of the lane's threads; ``await lane.in_session(fn, ...)``:
    ``fn(session, ...)`` with a session of the lane's pool, committed before the call returns."""

    def __init__(self, url: str, redis_url: str, threads: int = QUEUE_THREADS) -> None:
        self.threads = threads
        # one connection per thread, never more: a call never waits for one
        self.db = Database(url, pool_size=threads, max_overflow=0)
        self.redis = RedisService(redis_url, pool_size=threads + 2)  # a call's script and its reply's lookups
        self._limiter: anyio.CapacityLimiter | None = None

    @property
    def limiter(self) -> anyio.CapacityLimiter:
        if self._limiter is None:  # made in the running event loop (the server's; a test's)
            self._limiter = anyio.CapacityLimiter(self.threads)
        return self._limiter

    async def run(self, fn: Callable[..., T], *args: object) -> T:
        return await anyio.to_thread.run_sync(fn, *args, limiter=self.limiter)

    async def in_session(self, fn: Callable[..., T], *args: object) -> T:
        def call() -> T:
            with self.db.session() as db:
                return fn(db, *args)

        return await self.run(call)

    def close(self) -> None:
        self.db.engine.dispose()
        self.redis.close()  # the lane's calls are all synchronous: its asynchronous pool never connected
