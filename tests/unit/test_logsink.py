"""The worker's log sink: stdout and stderr are split into lines separately (a half line on one
never swallows the other), a last line without a newline still counts, and output written while
Redis is away waits and arrives in order, numbered on, once a Redis answers again."""

from __future__ import annotations

import redis
from helpers import free_port, redis_binary, start_redis

from raiprotocol.keys import stream_key
from raiprotocol.logwire import decode_entry
from raiprotocol.models import LogStream
from raiworker.logsink import LogSink


def lines(r: redis.Redis, job_id: str) -> list[tuple[str, str, int]]:
    return [(b.s, x, b.n + i) for b in (decode_entry(i, f) for i, f in r.xrange(stream_key(job_id)))
            for i, x in enumerate(b.lines())]


def test_streams_are_split_separately_and_the_last_line_counts(redis_url):
    r = redis.Redis.from_url(redis_url)
    sink = LogSink(r, "sink-split", output_bytes=1 << 20, line_bytes=1024)
    sink.feed(LogStream.out, b"progress 1")
    sink.feed(LogStream.err, b"warning: x\n")
    sink.feed(LogStream.out, b"0%\ndone")
    sink.flush()
    assert lines(r, "sink-split") == [("err", "warning: x", 1), ("out", "progress 10%", 2), ("out", "done", 3)]
    assert sink.first_output is not None and not sink.op_time_seen
    r.delete(stream_key("sink-split"))


def test_output_waits_while_redis_is_away_and_arrives_in_order(tmp_path):
    port = free_port()
    r = redis.Redis.from_url(f"redis://127.0.0.1:{port}/0")  # as the worker makes it
    sink = LogSink(r, "sink-away", output_bytes=1 << 20, line_bytes=1024)
    sink.feed(LogStream.out, b"".join(b"line %d\n" % i for i in range(1, 4)))  # nobody listens on the port
    sink.system("still going")
    assert sink.last_line == 0
    _, proc = start_redis(redis_binary("7"), tmp_path, port)
    try:
        sink.feed(LogStream.out, b"line 4\n")
        assert sink.close()
        assert lines(r, "sink-away") == [("out", "line 1", 1), ("out", "line 2", 2), ("out", "line 3", 3),
                                         ("sys", "still going", 4), ("out", "line 4", 5)]
        assert sink.last_line == 5
    finally:
        r.close()
        proc.terminate()
        proc.wait(10)
