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


def test_a_batch_whose_answer_was_lost_is_not_written_twice(redis_url):
    """Redis went away after writing a batch but before the worker heard so (the campaign's Redis
    kill hit this): the batch is sent again, and must not show up twice."""
    r = redis.Redis.from_url(redis_url)
    sink = LogSink(r, "sink-lost-answer", output_bytes=1 << 20, line_bytes=1024)
    real, calls = sink._append, []

    def answer_lost_once(keys, args):
        result = real(keys=keys, args=args)
        calls.append(args)
        if len(calls) == 1:
            raise redis.ConnectionError("connection closed before the reply")
        return result

    sink._append = answer_lost_once
    sink.feed(LogStream.out, b"line 1\n")  # written, but the sink believes it was not: it waits
    sink.feed(LogStream.out, b"line 2\n")  # the waiting batch goes again, then this one
    sink.flush()
    assert len(calls) == 3
    assert lines(r, "sink-lost-answer") == [("out", "line 1", 1), ("out", "line 2", 2)]
    assert sink.last_line == 2
    r.delete(stream_key("sink-lost-answer"))
