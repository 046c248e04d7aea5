"""Live log fan-out: one Redis reader per server process for every watched job, whatever the
number of people watching.

Each SSE stream registers a ``Watcher``; one task reads all watched jobs' streams with a single
blocking ``XREAD`` and hands each new batch to every watcher of that job. Another task looks at
the watched jobs' states every couple of seconds (queue position for the waiting, and the end of
a job whose end marker never came, e.g. after a Redis restart) with one database session for all.

A watcher holds a bounded buffer: one that cannot keep up is cut off cleanly (its stream closes
without an ``end`` event) and its client resumes with ``Last-Event-ID``; nobody else waits for it.
Streams are capped per user and per process, and refused with a ``Retry-After`` past a cap.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from fastapi.concurrency import run_in_threadpool
from redis.exceptions import RedisError

from raiprotocol import logwire
from raiprotocol.keys import job_of_stream, stream_key
from raiprotocol.logwire import END, Batch, decode_entry
from raiprotocol.models import JobOut, JobState
from raiserver.errors import Busy, OverQuota
from raiserver.live.logs import PAGE_ENTRIES, LogStore

QUEUED_NEWS = 5.0  # seconds between a waiting job's status events when nothing changed

log = logging.getLogger("raiserver")


@dataclass(frozen=True)
class Shared:
    """New batches of one job, with their SSE data, and the whole SSE event, encoded once for
    all watchers: fanning a batch out to a thousand watchers costs a thousand sends, no more."""

    batches: list[Batch]
    data: str

    @cached_property
    def frame(self) -> bytes:
        return f"event: lines\r\nid: {self.batches[-1].last}\r\ndata: {self.data}\r\n\r\n".encode()


@dataclass(eq=False)
class Watcher:
    job_id: str
    limit: int  # lines buffered before the watcher is cut off
    items: deque[tuple[str, Any]] = field(default_factory=deque)
    buffered: int = 0
    cut: bool = False
    wake: asyncio.Event = field(default_factory=asyncio.Event)

    def push(self, kind: str, payload: Any = None, lines: int = 0) -> None:
        if self.cut:
            return
        if lines and self.buffered + lines > self.limit:
            self.cut = True
            self.items.clear()
        else:
            self.items.append((kind, payload))
            self.buffered += lines
        self.wake.set()

    async def next(self) -> list[tuple[str, Any]]:
        """Everything that arrived since the last call (waits for something); [("cut", None)]
        once the watcher fell too far behind."""
        while not self.items and not self.cut:
            self.wake.clear()
            await self.wake.wait()
        if self.cut:
            return [("cut", None)]
        items = list(self.items)
        self.items.clear()
        self.buffered = 0
        return items


class LogHub:
    def __init__(
        self,
        logs: LogStore,
        status: Callable[[list[str]], dict[str, JobOut]],
        *,
        per_student: int,
        per_staff: int,
        per_process: int,
        buffer_lines: int,
        status_interval: float = 2.0,
    ):
        self.logs = logs
        self.status = status
        self.per_student, self.per_staff, self.per_process = per_student, per_staff, per_process
        self.buffer_lines = buffer_lines
        self.status_interval = status_interval
        self.watchers: dict[str, set[Watcher]] = {}
        self.positions: dict[str, int] = {}  # last line read from Redis, per watched job
        self.last_status: dict[str, tuple[tuple[Any, ...], float]] = {}  # job -> (what was pushed, when)
        self.streams: Counter[int] = Counter()  # open streams per user id
        self.open_streams = 0
        self.lines_sent = 0  # lines handed to watchers (metrics)
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    # -- caps ------------------------------------------------------------------------------------
    def admit(self, user_id: int, staff: bool) -> Callable[[], None]:
        """Count a new stream, or refuse it: 503 (this server is full) or 429 (this user), Retry-After 5 s.
        Returns what gives the slot back, once (the answer calls it as it ends: ``api/logstream._Held``)."""
        if self.open_streams >= self.per_process:
            raise Busy(f"this server is at its limit of {self.per_process} open log streams; retry shortly", 5)
        cap = self.per_staff if staff else self.per_student
        if self.streams[user_id] >= cap:
            raise OverQuota(
                f"you have {self.streams[user_id]} log streams open (the limit is {cap}); "
                "close some (other terminals or browser tabs) and retry",
                5,
            )
        self.streams[user_id] += 1
        self.open_streams += 1
        return functools.partial(self.release, user_id)

    def release(self, user_id: int) -> None:
        self.streams[user_id] -= 1
        if self.streams[user_id] <= 0:
            del self.streams[user_id]
        self.open_streams -= 1

    # -- watching ----------------------------------------------------------------------------------
    async def watch(self, job_id: str) -> Watcher:
        if job_id not in self.positions:
            last = await self.logs.alast(job_id)
            self.positions.setdefault(job_id, last)  # another watcher may have come meanwhile
        w = Watcher(job_id, self.buffer_lines)
        self.watchers.setdefault(job_id, set()).add(w)
        self._start()
        self._wake.set()
        return w

    def unwatch(self, w: Watcher) -> None:
        group = self.watchers.get(w.job_id)
        if group is None:
            return
        group.discard(w)
        if not group:
            del self.watchers[w.job_id]
            self.positions.pop(w.job_id, None)
            self.last_status.pop(w.job_id, None)

    def position(self, job_id: str) -> int:
        return self.positions.get(job_id, 0)

    def _start(self) -> None:
        if not self._tasks:
            self._tasks = [asyncio.create_task(self._read_loop()), asyncio.create_task(self._status_loop())]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        self._tasks = []

    # -- the two loops -----------------------------------------------------------------------------
    async def _read_loop(self) -> None:
        while True:
            if not self.positions:
                self._wake.clear()
                await self._wake.wait()
                continue
            streams = {stream_key(j): f"0-{p}" for j, p in self.positions.items()}
            try:
                resp = await self.logs.aredis.xread(streams, count=PAGE_ENTRIES, block=250)
            except (RedisError, OSError) as exc:
                log.warning("live log reader: %s; retrying", exc)
                await asyncio.sleep(1.0)
                continue
            except Exception:  # noqa: BLE001 - the reader must outlive any one bad entry
                log.exception("live log reader failed; retrying")
                await asyncio.sleep(1.0)
                continue
            for key, entries in resp or []:
                job_id = job_of_stream(key.decode() if isinstance(key, bytes) else key)
                if job_id not in self.positions or not entries:
                    continue
                batches = [decode_entry(i, f) for i, f in entries]
                self.positions[job_id] = batches[-1].last
                lines = [b for b in batches if b.s != END]
                ended = len(lines) != len(batches)
                count = sum(b.c for b in lines)
                shared = Shared(lines, logwire.dumps(lines)) if lines else None

                for w in list(self.watchers.get(job_id, ())):
                    if shared:
                        w.push("lines", shared, count)
                        self.lines_sent += count
                    if ended:
                        w.push("end")

    async def _status_loop(self) -> None:
        while True:
            await asyncio.sleep(self.status_interval)
            ids = list(self.watchers)
            if not ids:
                continue
            try:
                snaps = await run_in_threadpool(self.status, ids)
            except Exception:  # noqa: BLE001 - the database may be restarting
                log.exception("live log status pass failed")
                continue
            now = time.monotonic()
            for job_id, job in snaps.items():
                if job_id not in self.watchers:  # its last watcher left while the pass ran: nothing to keep for it
                    continue
                current = (job.state.value, job.position, job.eta_seconds, job.eta_low, job.eta_high, job.eta_guess, job.worker)
                said = self.last_status.get(job_id)
                # a change, or a waiting job's news every few seconds even without one: an ETA that holds
                # still (issue 37) sends no change, and clients show at least every 30 s that it waits
                if said is not None and said[0] == current and not (job.state is JobState.queued and now - said[1] > QUEUED_NEWS):
                    continue
                self.last_status[job_id] = (current, now)
                for w in list(self.watchers.get(job_id, ())):
                    w.push("finished" if job.state.finished else "status", job)
