"""Job logs: a Redis Stream per job while it runs, a JSON-lines file in storage once it ends.

Both hold batches of lines (``raiprotocol.logwire``): a batch's lines are numbered in the whole log,
and the number of the last line is its SSE event id, which makes ``Last-Event-ID`` resumption
exact: no line lost or repeated. Archiving, replay and download go page by page, so a log of
millions of lines never sits in the server's memory at once.
"""

from __future__ import annotations

import json
import time
from bisect import bisect_right
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import anyio
import anyio.to_thread

from raiprotocol import logwire
from raiprotocol.keys import stream_key
from raiprotocol.logwire import APPEND_LUA, END, Batch, append_call, decode_entry, lost_range, restored_note
from raiprotocol.markers import SYSTEM_MARK, disarm, one_line
from raiprotocol.models import LogStream
from raiserver.store.redisconn import RedisService
from raiserver.store.storage import Storage

PAGE_ENTRIES = 500  # Redis entries per XRANGE page
PAGE_BYTES = 1024**2  # bytes of stored log per replay page


def read_copy(path: Path) -> list[Batch]:
    """A worker's copy of its run's lines: JSON lines of batches (``n`` 0 for batches Redis never
    numbered); a line that does not parse ends it (a cut upload keeps what came whole)."""
    out: list[Batch] = []
    with path.open("rb") as fh:
        for raw in fh:
            try:
                batch = Batch.from_dict(json.loads(raw))
            except (ValueError, KeyError, TypeError):
                break
            if batch.c >= 0 and batch.s != END:
                out.append(batch)
    return out


def merge(stream: list[Batch], copy: list[Batch]) -> list[Batch]:
    """The stored log made whole from the worker's copy after Redis lost lines: the copy's
    batches hold their line numbers (given by Redis when each was written), the stream's fill in
    the rest (rai's own lines, earlier attempts). A stream batch numbered anew after Redis lost
    the stream (one that collides with the copy's) and batches Redis never numbered go at the end;
    a note that named lines as lost says they were restored, once they all are. Linear after the
    sort: a log is at most the output cap."""
    numbered = sorted((b for b in copy if b.n > 0), key=lambda b: b.n)
    kept: list[Batch] = []
    for b in numbered:  # the copy's own numbers never overlap; keep the first of any that would
        if not kept or b.n > kept[-1].last:
            kept.append(b)
    starts = [b.n for b in kept]
    same = {(b.n, b.c, b.s, b.x) for b in kept}
    out, moved = list(kept), []
    for b in stream:
        if (b.n, b.c, b.s, b.x) in same:
            continue
        i = bisect_right(starts, b.last) - 1  # the copy's batch starting at or before b's last line
        if i >= 0 and kept[i].last >= b.n:
            moved.append(b)
        else:
            out.append(b)
    out.sort(key=lambda b: b.n)
    following = (out[-1].last if out else 0) + 1
    for b in [*moved, *(b for b in copy if b.n <= 0)]:
        out.append(Batch(following, b.t, b.s, b.c, b.x))
        following += b.c
    spans = [(b.n, b.last) for b in out]
    for i, b in enumerate(out):
        named = lost_range(b.x) if b.s == LogStream.sys.value and b.c == 1 else None
        if named is not None and _covered(spans, *named):
            out[i] = Batch(b.n, b.t, b.s, 1, restored_note(*named))
    return out


def _covered(spans: list[tuple[int, int]], first: int, last: int) -> bool:
    """Every line from ``first`` to ``last`` is in ``spans`` (sorted, not overlapping)."""
    want = first
    for a, z in spans[max(bisect_right([a for a, _ in spans], first) - 1, 0) :]:
        if a > want:
            return False
        want = max(want, z + 1)
        if want > last:
            return True
    return False


T = TypeVar("T")
PAGE_THREADS = 4  # stored pages read (and rendered) at once, per process


class LogStore:
    """A job's log, live and stored. Fences, leases and cancel flags are ``store.runmarks``'."""

    def __init__(self, redis_service: RedisService, storage: Storage, ttl: int):
        self.redis = redis_service.sync
        self.aredis = redis_service.aio
        self.storage = storage
        self.ttl = ttl
        self._append = self.redis.register_script(APPEND_LUA)
        self._page_threads: anyio.CapacityLimiter | None = None

    async def in_page_thread(self, fn: Callable[..., T], *args: object) -> T:
        """``fn`` in one of the threads that read stored logs (``PAGE_THREADS`` a process, every
        reader's: a stream's pages, a download's): readers of long logs, whose pages are read after
        their answers started (past admission), wait for these, not for the threads every other
        request runs in (the hostile review of 2026-11-29: ten downloads of one student's longest
        logs, over and over, kept ten of them busy)."""
        if self._page_threads is None:  # made in the running event loop
            self._page_threads = anyio.CapacityLimiter(PAGE_THREADS)
        return await anyio.to_thread.run_sync(fn, *args, limiter=self._page_threads)

    async def stored_wire(self, job_id: str, after: int, max_bytes: int = 256 * 1024) -> AsyncIterator[tuple[str, int]]:
        """The stored log after line ``after`` as the wire's pages: each about ``max_bytes`` of batches
        as ``logwire.dumps`` encodes them, with its last line's number (its SSE event id). Each page is
        read and encoded in the page threads (``in_page_thread``): bounded memory however long the
        log, nothing more read once the reader is gone, and the event loop free meanwhile."""

        def page(offset: int) -> tuple[tuple[str, int] | None, int]:
            batches, offset = self.stored_page(job_id, offset, after, max_bytes)
            return ((logwire.dumps(batches), batches[-1].last) if batches else None), offset

        offset = 0
        while offset >= 0:
            got, offset = await self.in_page_thread(page, offset)
            if got is not None:
                yield got

    async def stored_text(self, job_id: str) -> AsyncIterator[bytes]:
        """The stored log as plain text (``log.txt``), a page at a time, read and rendered in the
        page threads: rai's own lines after its mark, the job's disarmed (no line of the job's can
        pass for one of rai's)."""

        def page(offset: int) -> tuple[bytes, int]:
            batches, offset = self.stored_page(job_id, offset, 0)
            text = "".join(
                "".join(f"{SYSTEM_MARK} {t}\n" for t in b.lines()) if b.s == "sys" else "".join(f"{disarm(t)}\n" for t in b.lines())
                for b in batches
            )
            return text.encode(), offset

        offset = 0
        while offset >= 0:
            text, offset = await self.in_page_thread(page, offset)
            yield text

    # -- writing (server side: system lines and the end marker) -------------------------------
    def system(self, job_id: str, text: str, t: float | None = None) -> None:
        keys, args = append_call(stream_key(job_id), LogStream.sys.value, t or time.time(), one_line(text), 1)
        self._append(keys=keys, args=args)

    def end(self, job_id: str, state: str) -> None:
        keys, args = append_call(stream_key(job_id), END, time.time(), state, 1)
        self._append(keys=keys, args=args)

    def pages(self, job_id: str, after: int = 0) -> Iterator[list[Batch]]:
        """The live stream after line ``after``, a page at a time (end marker left out)."""
        key = stream_key(job_id)
        while True:
            entries = self.redis.xrange(key, min=f"0-{after + 1}", max="+", count=PAGE_ENTRIES)
            batches = [b for b in (decode_entry(i, f) for i, f in entries) if b.s != END]
            if batches:
                yield [b.after(after) or b for b in batches]
            if len(entries) < PAGE_ENTRIES:
                return
            after = decode_entry(*entries[-1]).last

    def archive(self, job_id: str, worker_copy: Path | None = None, each: Callable[[Batch], None] | None = None) -> int:
        """Copy the live stream into storage page by page; keep it in Redis a little longer for
        late readers. ``worker_copy``: the lines the run's worker kept (JSON lines of batches),
        sent when Redis lost some of them: the stored log is made whole from it (``merge``).
        ``each``: sees every batch stored, in order (the job's results are read from them).
        Returns the number of lines."""
        key = stream_key(job_id)
        lines = 0
        with self.storage.log_writer(job_id) as fh:
            if worker_copy is None:
                batches: Iterator[Batch] = (b for page in self.pages(job_id) for b in page)
            else:
                batches = iter(merge([b for page in self.pages(job_id) for b in page], read_copy(worker_copy)))
            for batch in batches:
                fh.write(json.dumps(batch.to_dict(), ensure_ascii=False) + "\n")
                lines += batch.c
                if each is not None:
                    each(batch)
        self.redis.expire(key, self.ttl)
        return lines

    def system_after_archive(self, job_id: str, text: str) -> None:
        """A line of rai's once the log is stored (a ranked run's verdict, known only then): at the
        end of the stored log and of the live stream, before the end marker."""
        path = self.storage.log_path(job_id)
        last = 0
        with path.open("rb") as fh:  # the last batch: its line is the last
            fh.seek(max(path.stat().st_size - 2 * PAGE_BYTES, 0))
            for raw in fh:
                try:
                    last = max(last, Batch.from_dict(json.loads(raw)).last)
                except (ValueError, KeyError, TypeError):
                    continue
        batch = Batch(last + 1, time.time(), LogStream.sys.value, 1, one_line(text))
        with path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(batch.to_dict(), ensure_ascii=False) + "\n")
        self.system(job_id, text)

    # -- reading the stored log ------------------------------------------------------------------
    def stored_page(self, job_id: str, offset: int, after: int, max_bytes: int = PAGE_BYTES) -> tuple[list[Batch], int]:
        """Batches after line ``after`` from byte ``offset`` of the stored log, about ``max_bytes``
        of them; returns them and the offset to go on from (-1 at the end). A log deleted part way
        through (retention, its owner) raises: a reader's stream breaks rather than end as if whole."""
        path = self.storage.log_path(job_id)
        batches: list[Batch] = []
        try:
            fh = path.open("rb")
        except FileNotFoundError:
            if offset > 0:
                raise
            return batches, -1
        with fh:
            fh.seek(offset)
            read = 0
            while read < max_bytes:
                raw = fh.readline()
                if not raw:
                    return batches, -1
                read += len(raw)
                batch = Batch.from_dict(json.loads(raw)).after(after)
                if batch is not None:
                    batches.append(batch)
            return batches, offset + read

    def stored(self, job_id: str, after: int = 0) -> Iterator[Batch]:
        offset = 0
        while offset >= 0:
            batches, offset = self.stored_page(job_id, offset, after)
            yield from batches

    # -- reading the live stream (async) ---------------------------------------------------------
    async def alast(self, job_id: str) -> int:
        """The number of the last line in the live stream (0 if none yet)."""
        top = await self.aredis.xrevrange(stream_key(job_id), count=1)
        return decode_entry(*top[0]).last if top else 0

    async def apage(self, job_id: str, after: int) -> list[Batch]:
        """One page of the live stream after line ``after`` (the end marker included)."""
        entries = await self.aredis.xrange(stream_key(job_id), min=f"0-{after + 1}", max="+", count=PAGE_ENTRIES)
        return [b.after(after) or b for b in (decode_entry(i, f) for i, f in entries)]
