"""Job logs: a Redis Stream per job while it runs, a JSON-lines file in storage once it ends.

Both hold batches of lines (``raiprotocol.logwire``): a batch's lines are numbered in the whole log,
and the number of the last line is its SSE event id, which makes ``Last-Event-ID`` resumption
exact: no line lost or repeated. Archiving, replay and download go page by page, so a log of
millions of lines never sits in the server's memory at once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import redis
import redis.asyncio as aioredis

from raiprotocol.keys import cancel_key, stream_key
from raiprotocol.logwire import APPEND_LUA, END, Batch, append_args, decode_entry
from raiprotocol.markers import one_line
from raiprotocol.models import LogStream

from .storage import Storage

PAGE_ENTRIES = 500  # Redis entries per XRANGE page
PAGE_BYTES = 1024**2  # bytes of stored log per replay page

class LogStore:
    def __init__(self, redis_url: str, storage: Storage, ttl: int, pool_size: int = 16):
        # Both clients share small pools and wait for a free connection rather than fail: the
        # connections a server process holds never grow with the number of people watching.
        self.redis = redis.Redis(connection_pool=redis.BlockingConnectionPool.from_url(
            redis_url, max_connections=pool_size, timeout=20))
        self.aredis = aioredis.Redis(connection_pool=aioredis.BlockingConnectionPool.from_url(
            redis_url, max_connections=pool_size, timeout=20))
        self.storage = storage
        self.ttl = ttl
        self._append = self.redis.register_script(APPEND_LUA)

    # -- writing (server side: system lines and the end marker) -------------------------------
    def system(self, job_id: str, text: str, t: float | None = None) -> None:
        self._append(keys=[stream_key(job_id)], args=append_args(LogStream.sys.value, t or time.time(), one_line(text), 1))

    def end(self, job_id: str, state: str) -> None:
        self._append(keys=[stream_key(job_id)], args=append_args(END, time.time(), state, 1))

    def request_cancel(self, job_id: str) -> None:
        self.redis.set(cancel_key(job_id), b"1", ex=24 * 3600)

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

    def archive(self, job_id: str) -> int:
        """Copy the live stream into storage page by page; keep it in Redis a little longer for
        late readers. Returns the number of lines."""
        key = stream_key(job_id)
        lines = 0
        with self.storage.log_writer(job_id) as fh:
            for page in self.pages(job_id):
                for batch in page:
                    fh.write(json.dumps(batch.to_dict(), ensure_ascii=False) + "\n")
                    lines += batch.c
        self.redis.expire(key, self.ttl)
        self.redis.delete(cancel_key(job_id))
        return lines

    # -- reading the stored log ------------------------------------------------------------------
    def stored_page(self, job_id: str, offset: int, after: int, max_bytes: int = PAGE_BYTES) -> tuple[list[Batch], int]:
        """Batches after line ``after`` from byte ``offset`` of the stored log, about ``max_bytes``
        of them; returns them and the offset to go on from (-1 at the end)."""
        path = self.storage.log_path(job_id)
        batches: list[Batch] = []
        try:
            fh = path.open("rb")
        except FileNotFoundError:
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

    async def aclose(self) -> None:
        await self.aredis.aclose()
        self.redis.close()
