"""Output lines from a job into its Redis Stream, as they come, with time and stream.

Bytes are split into lines per stream (stdout and stderr separately); each chunk read becomes one
batch entry (``raiprotocol.logwire``), so a program printing millions of lines costs thousands of
Redis calls, not millions. ``\\r`` progress output is folded the way a terminal shows it (only
what is left after the last carriage return), long lines are cut, and past the job's output cap
(bytes, and lines: empty lines count too) the stream says so once and drops the rest while the
job runs on.

If Redis goes away (a restart), batches wait in memory (bounded) and go out in order once it is
back; the job goes on. If Redis came back without the stream, numbering carries on after the
last line this sink wrote, and the log says which lines were lost; the sink keeps a copy of every
line it wrote (``spool``, bounded by the output cap), which the runner sends to the server after
such trouble so that the stored log is whole.

Every append carries the run's attempt and is checked against the job's fence in the same Redis
call: once another attempt owns the job (or it ended), the sink is ``superseded``, stores nothing
more and says so (``on_superseded``): the run must stop.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import IO

import redis

from raiprotocol.keys import fence_key, stream_key
from raiprotocol.logwire import APPEND_LUA, FENCE_MISSING, SUPERSEDED, append_call, decode_entry, lost_note
from raiprotocol.markers import one_line
from raiprotocol.models import LogStream

from .gpu.counters import REFUSED
from .metrics import lines_shipped


def size_in_words(n: int) -> str:
    return f"{n / 1024**2:g} MiB" if n >= 1024**2 else f"{n / 1024:g} KiB" if n >= 1024 else f"{n} bytes"


def fold_cr(line: bytes) -> bytes:
    """What a terminal shows of a line rewritten with ``\\r`` (a progress bar): its last version."""
    line = line.rstrip(b"\r")
    return line[line.rfind(b"\r") + 1 :]


@dataclass(slots=True)
class _Pending:
    stream: str
    t: float
    text: str
    count: int
    batch_id: str


class LogSink:
    def __init__(
        self,
        r: redis.Redis,
        job_id: str,
        output_bytes: int,
        line_bytes: int,
        output_lines: int = 2_500_000,
        progress_seconds: float = 10.0,
        attempt: int | None = None,
        spool: Path | None = None,
        on_superseded: Callable[[], None] = lambda: None,
    ):
        self.redis = r
        self.key = stream_key(job_id)
        self.fence = (fence_key(job_id), attempt) if attempt is not None else None
        self.superseded = False  # another attempt owns the job, or it ended: nothing more is stored
        self.on_superseded = on_superseded
        self.trouble = False  # Redis failed, lost lines or its fence while the job ran: send the spool
        self.spool_path = spool
        self._spool: IO[str] | None = spool.open("w", encoding="utf-8") if spool is not None else None
        self.output_bytes = output_bytes
        self.output_lines = output_lines
        self.line_bytes = line_bytes
        self.written = 0
        self.lines = 0
        self.truncated = False
        self.op_time_seen = False  # did the current command print "Op Time:"? (timing repeats)
        self.counters_refused = False  # did a profiler print that the GPU's counters were refused it?
        self.progress_seconds = progress_seconds  # a progress bar still running shows this often
        self._shown: dict[LogStream, float] = {}
        self._append = r.register_script(APPEND_LUA)
        self._pending: list[_Pending] = []  # batches waiting for Redis to come back
        self._ids = f"{secrets.token_hex(4)}-"  # with a counter: each batch's id, so a retried write is not doubled
        self._sent = 0
        self._unsure = False  # the batch at the head was sent and Redis failed before answering
        self._pending_bytes = 0
        self._dropped = 0  # lines dropped while Redis was away and the wait buffer full
        self.last_line = 0  # number of the last line this sink wrote
        self.first_output: datetime | None = None  # when the job printed its first line
        self.max_pending_bytes = 64 * 1024**2
        self._buffers: dict[LogStream, bytearray] = {LogStream.out: bytearray(), LogStream.err: bytearray()}
        self._lock = threading.Lock()

    def system(self, text: str) -> None:
        with self._lock:
            self._write(LogStream.sys, one_line(text), 1)  # one line, whatever the message holds

    def feed(self, stream: LogStream, data: bytes) -> None:
        """Take a chunk of raw output; its complete lines go to Redis at once, as one batch.
        Linear in the chunk's size with the splitting done in C (a job may print a gigabyte)."""
        with self._lock:
            if self.truncated or not data:
                return
            buf = self._buffers[stream]
            if b"\n" not in data:
                buf += data
                self._hold(stream, buf)
                return
            parts = (bytes(buf) + data).split(b"\n")
            self._shown.pop(stream, None)
            buf.clear()
            buf += parts.pop()  # the unfinished last line waits for more
            self._hold(stream, buf)
            self._emit(stream, parts)

    def flush(self) -> None:
        """At the end of a command: a last line without a newline still counts."""
        with self._lock:
            for stream, buf in self._buffers.items():
                if buf and not self.truncated:
                    self._emit(stream, [bytes(buf)])
                buf.clear()

    def _hold(self, stream: LogStream, buf: bytearray) -> None:
        """Keep an unfinished line bounded: fold its ``\\r`` rewrites; cut it past the line size."""
        if b"\r" in buf[:-1]:
            keep = fold_cr(bytes(buf[:-1])) + bytes(buf[-1:])
            buf[:] = keep
            # a long progress bar shows its state now and then, not only when its line ends
            now = time.monotonic()
            shown = self._shown.setdefault(stream, now)
            if now - shown >= self.progress_seconds:
                self._shown[stream] = now
                self._emit(stream, [fold_cr(bytes(buf))])
        while len(buf) > self.line_bytes and not self.truncated:
            piece = bytes(buf[: self.line_bytes])
            del buf[: self.line_bytes]
            self._emit(stream, [piece])

    def _emit(self, stream: LogStream, parts: list[bytes]) -> None:
        if not parts or self.truncated:
            return
        # whole-chunk checks in C first: a chunk holds thousands of lines, and a Python loop over
        # them was most of the worker's time for a job printing millions (issue 38)
        joined = b"\n".join(parts)
        if b"\r" in joined:
            parts = [fold_cr(p) if b"\r" in p else p for p in parts]
            joined = b"\n".join(parts)
        if len(joined) > self.line_bytes and max(map(len, parts)) > self.line_bytes:
            parts = [p[i : i + self.line_bytes] for p in parts for i in range(0, max(len(p), 1), self.line_bytes)]
            joined = b"\n".join(parts)
        size = len(joined) + 1  # each line and its newline
        if self.written + size > self.output_bytes or self.lines + len(parts) > self.output_lines:
            fit, room = 0, self.output_bytes - self.written
            while fit < len(parts) and fit < self.output_lines - self.lines and room >= len(parts[fit]) + 1:
                room -= len(parts[fit]) + 1
                fit += 1
            if fit:
                self._emit(stream, parts[:fit])
            self.truncated = True
            for b in self._buffers.values():
                b.clear()
            what = size_in_words(self.output_bytes) if self.lines < self.output_lines else f"{self.output_lines:,} lines"
            self._write(LogStream.sys, f"output truncated after {what}; the job keeps running", 1)
            return
        self.written += size
        self.lines += len(parts)
        if self.first_output is None:
            self.first_output = datetime.now(timezone.utc)
        text = joined.decode("utf-8", errors="replace")
        if stream is LogStream.out and "Op Time:" in text:
            self.op_time_seen = True
        if not self.counters_refused and REFUSED in text:
            self.counters_refused = True
        self._write(stream, text, len(parts))

    def _write(self, stream: LogStream, text: str, count: int) -> None:
        if self.superseded:
            return
        lines_shipped(count)
        batch = self._batch(stream.value, text, count)
        if self._pending_bytes + len(text) <= self.max_pending_bytes:
            self._pending.append(batch)
            self._pending_bytes += len(text)
        else:
            self._dropped += count
            self.trouble = True
        self._send()

    def _batch(self, stream: str, text: str, count: int) -> _Pending:
        self._sent += 1
        return _Pending(stream, time.time(), text, count, f"{self._ids}{self._sent}")

    def _send(self) -> None:
        """Write what waits, in order; on a Redis error, or while Redis lacks the job's fence,
        keep it for the next try."""
        try:
            if self._dropped:
                note = f"{self._dropped} lines were dropped while Redis was unreachable"
                self._pending.append(self._batch(LogStream.sys.value, note, 1))
                self._dropped = 0
            while self._pending and not self.superseded:
                b = self._pending[0]
                keys, args = append_call(
                    self.key,
                    b.stream,
                    b.t,
                    b.text,
                    b.count,
                    floor=self.last_line,
                    batch_id=b.batch_id,
                    again=self._unsure,
                    fence=self.fence,
                )  # again: its last try may have been written
                self._unsure = True
                n, had = self._append(keys=keys, args=args)
                self._unsure = False
                if n == FENCE_MISSING:  # Redis lost the job's fence: the server puts it back soon
                    self.trouble = True
                    return
                if n == SUPERSEDED:
                    self._supersede()
                    return
                self._pending.pop(0)
                self._pending_bytes -= len(b.text)
                if had < self.last_line:  # Redis restarted without the stream: say what is missing
                    self.trouble = True
                    lost = lost_note(had + 1, self.last_line)
                    self._pending.insert(0, self._batch(LogStream.sys.value, lost, 1))
                    self._pending_bytes += len(lost)
                self.last_line = int(n)
                self._keep(int(n) - b.count + 1, b)
        except redis.RedisError:
            self.trouble = True  # Redis is away: the batches wait here

    def _supersede(self) -> None:
        self.superseded = True
        self._pending.clear()
        self._pending_bytes = 0
        with contextlib.suppress(Exception):  # the runner's; the sink stores nothing more either way
            self.on_superseded()

    def _keep(self, first: int, b: _Pending) -> None:
        """The worker's own copy of what it wrote (``n`` 0: never numbered by Redis)."""
        if self._spool is not None:
            self._spool.write(json.dumps({"n": first, "t": b.t, "s": b.stream, "c": b.count, "x": b.text}, ensure_ascii=False) + "\n")

    def whole_in_redis(self) -> bool:
        """At the end: Redis still holds this run's last line (a flush after the last write is
        seen only here). False when it cannot tell."""
        if self.last_line == 0:
            return True
        try:
            top = self.redis.xrevrange(self.key, count=1)
        except redis.RedisError:
            return False
        return bool(top) and decode_entry(*top[0]).last >= self.last_line

    def close(self, wait: float = 60.0) -> bool:
        """At the job's end: try hard (for a while) to write what still waits; what could not be
        written goes into the spool unnumbered. False if some of it could not be written."""
        deadline = time.monotonic() + wait
        while self._pending and not self.superseded and time.monotonic() < deadline:
            with self._lock:
                self._send()
            if self._pending:
                time.sleep(0.5)
        with self._lock:
            written = not self._pending
            for b in self._pending:
                self._keep(0, b)
            self._pending.clear()
            if self._spool is not None:
                self._spool.close()
                self._spool = None
        return written
