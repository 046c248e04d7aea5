"""Job logs: a Redis Stream per job while it runs, a JSON-lines file in storage once it ends.

Entries are added with the id ``0-*``, so Redis numbers them 1, 2, 3… atomically, whoever writes
(worker or server, first attempt or a retry). That number is the line's position and the SSE
event id, which makes ``Last-Event-ID`` resumption exact: no line lost or repeated.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator

import redis
import redis.asyncio as aioredis

from raiclient.keys import cancel_key, stream_key
from raiclient.models import LogLine, LogStream

from .storage import Storage

END = "end"


def _decode(entry_id: bytes | str, fields: dict) -> tuple[int, dict[str, str]]:
    eid = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    n = int(eid.split("-", 1)[1])
    f = {(k.decode() if isinstance(k, bytes) else k): (v.decode("utf-8", "replace") if isinstance(v, bytes) else v) for k, v in fields.items()}
    return n, f


def to_line(n: int, f: dict[str, str]) -> LogLine:
    return LogLine(n=n, t=float(f.get("t", 0)), s=LogStream(f.get("s", "out")), text=f.get("x", ""))


class LogStore:
    def __init__(self, redis_url: str, storage: Storage, ttl: int):
        self.redis = redis.Redis.from_url(redis_url)
        self.aredis = aioredis.Redis.from_url(redis_url)
        self.storage = storage
        self.ttl = ttl

    # -- writing (server side: system lines and the end marker) -------------------------------
    def system(self, job_id: str, text: str, t: float | None = None) -> None:
        self.redis.xadd(stream_key(job_id), {"t": f"{t or time.time():.6f}", "s": LogStream.sys.value, "x": text}, id="0-*")

    def end(self, job_id: str, state: str) -> None:
        self.redis.xadd(stream_key(job_id), {"t": f"{time.time():.6f}", "s": END, "x": state}, id="0-*")

    def request_cancel(self, job_id: str) -> None:
        self.redis.set(cancel_key(job_id), b"1", ex=24 * 3600)

    def archive(self, job_id: str) -> int:
        """Copy the live stream into storage; keep it in Redis a little longer for late readers."""
        key = stream_key(job_id)
        lines = []
        for entry_id, fields in self.redis.xrange(key):
            n, f = _decode(entry_id, fields)
            if f.get("s") == END:
                continue
            lines.append(to_line(n, f).model_dump_json())
        self.storage.write_log(job_id, lines)
        self.redis.expire(key, self.ttl)
        self.redis.delete(cancel_key(job_id))
        return len(lines)

    # -- reading -------------------------------------------------------------------------------
    def stored(self, job_id: str, after: int = 0) -> Iterator[LogLine]:
        path = self.storage.log_path(job_id)
        if not path.exists():
            return
        with path.open(encoding="utf-8") as fh:
            for raw in fh:
                line = LogLine.model_validate(json.loads(raw))
                if line.n > after:
                    yield line

    def stored_text(self, job_id: str) -> str:
        return "\n".join(line.text for line in self.stored(job_id) if line.s is not LogStream.sys)

    async def tail(self, job_id: str, after: int, block_ms: int = 1000) -> AsyncIterator[tuple[int, dict[str, str]] | None]:
        """Yield live entries after position ``after``; ``None`` on each idle block so callers can
        check on the job. Stops after the end marker."""
        key = stream_key(job_id)
        last = f"0-{after}"
        while True:
            resp = await self.aredis.xread({key: last}, count=500, block=block_ms)
            if not resp:
                yield None
                continue
            for entry_id, fields in resp[0][1]:
                n, f = _decode(entry_id, fields)
                last = f"0-{n}"
                yield n, f
                if f.get("s") == END:
                    return

    async def aclose(self) -> None:
        await self.aredis.aclose()
        self.redis.close()
