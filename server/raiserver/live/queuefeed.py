"""The live queue page's data, shared by every watcher of one server process: computed at most
once a second however many people watch, with the session check of every watcher in the same
pass. What to compute is handed in (``create_app``), so the fan-out knows nothing of jobs."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from typing import Any

from fastapi.concurrency import run_in_threadpool

Rows = dict[str, list[dict[str, Any]]]
Sessions = dict[int, tuple[bool, str]]  # user id -> (active, key tag)


class QueueFeed:
    def __init__(self, compute: Callable[[list[int]], tuple[Rows, Sessions]]):
        self.compute = compute  # the watchers' user ids -> the rows and their sessions
        self.at = -1.0
        self.rows: Rows = {}
        self.sessions: Sessions = {}
        self.watching: Counter[int] = Counter()
        self.lock = asyncio.Lock()

    async def get(self) -> tuple[Rows, Sessions]:
        async with self.lock:
            now = asyncio.get_running_loop().time()
            if now - self.at >= 1.0:
                self.rows, self.sessions = await run_in_threadpool(self.compute, list(self.watching))
                self.at = asyncio.get_running_loop().time()
            return self.rows, self.sessions
