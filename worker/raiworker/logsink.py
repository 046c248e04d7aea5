"""Output lines from a job into its Redis Stream, as they come, with time and stream.

Bytes are split into lines per stream (stdout and stderr separately), long lines are cut, and
past the job's output cap the stream says so once and drops the rest while the job runs on.
"""

from __future__ import annotations

import threading
import time

import redis

from raiclient.keys import stream_key
from raiclient.models import LogStream


class LogSink:
    def __init__(self, r: redis.Redis, job_id: str, output_bytes: int, line_bytes: int):
        self.redis = r
        self.key = stream_key(job_id)
        self.output_bytes = output_bytes
        self.line_bytes = line_bytes
        self.written = 0
        self.truncated = False
        self.lines = 0
        self.op_time_seen = False  # did the current command print "Op Time:"? (timing repeats)
        self._buffers: dict[LogStream, bytearray] = {LogStream.out: bytearray(), LogStream.err: bytearray()}
        self._lock = threading.Lock()

    def system(self, text: str) -> None:
        self._add([(LogStream.sys, text)])

    def feed(self, stream: LogStream, data: bytes) -> None:
        """Take a chunk of raw output; complete lines go to Redis at once. Linear in the chunk's
        size (a job may print a gigabyte), and past the cap it only counts."""
        with self._lock:
            if self.truncated:
                return
            buf = self._buffers[stream]
            parts = data.split(b"\n")
            parts[0] = bytes(buf) + parts[0]
            buf.clear()
            buf += parts.pop()  # the unfinished last line waits for more
            lines: list[tuple[LogStream, str]] = []
            for part in parts:
                for i in range(0, max(len(part), 1), self.line_bytes):
                    lines.extend(self._accept(stream, part[i:i + self.line_bytes]))
            while len(buf) >= self.line_bytes:  # a line with no end in sight: emit it in pieces
                lines.extend(self._accept(stream, bytes(buf[:self.line_bytes])))
                del buf[:self.line_bytes]
            if self.truncated:
                for b in self._buffers.values():
                    b.clear()
        self._add(lines)

    def flush(self) -> None:
        """At the end of a command: a last line without a newline still counts."""
        with self._lock:
            lines = []
            for stream, buf in self._buffers.items():
                if buf:
                    lines.extend(self._accept(stream, bytes(buf)))
                    buf.clear()
        self._add(lines)

    def _accept(self, stream: LogStream, piece: bytes) -> list[tuple[LogStream, str]]:
        if self.truncated:
            return []
        self.written += len(piece) + 1
        if self.written > self.output_bytes:
            self.truncated = True
            mib = self.output_bytes / 1024**2
            return [(LogStream.sys, f"output truncated after {mib:g} MiB; the job keeps running")]
        text = piece.decode("utf-8", errors="replace").rstrip("\r")
        if stream is LogStream.out and "Op Time:" in text:
            self.op_time_seen = True
        return [(stream, text)]

    def _add(self, lines: list[tuple[LogStream, str]]) -> None:
        if not lines:
            return
        now = f"{time.time():.6f}"
        pipe = self.redis.pipeline(transaction=False)
        for stream, text in lines:
            pipe.xadd(self.key, {"t": now, "s": stream.value, "x": text}, id="0-*")
        pipe.execute()
        self.lines += len(lines)
