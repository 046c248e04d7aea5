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
    return [(b.s, x, b.n + i) for b in (decode_entry(i, f) for i, f in r.xrange(stream_key(job_id))) for i, x in enumerate(b.lines())]


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
        assert lines(r, "sink-away") == [
            ("out", "line 1", 1),
            ("out", "line 2", 2),
            ("out", "line 3", 3),
            ("sys", "still going", 4),
            ("out", "line 4", 5),
        ]
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


def test_a_superseded_attempt_writes_nothing_more_and_says_so(redis_url, tmp_path):
    """The fence: once the job's attempt moved on (requeued, taken over, ended), the old run's next
    line is refused in the same Redis call that would store it, and the run is told to stop."""
    from raiprotocol.keys import fence_key
    from raiprotocol.logwire import FENCE_LUA

    r = redis.Redis.from_url(redis_url)
    raise_fence = r.register_script(FENCE_LUA)
    raise_fence(keys=[fence_key("sink-fenced")], args=["1", 60])
    told: list[bool] = []
    sink = LogSink(
        r,
        "sink-fenced",
        output_bytes=1 << 20,
        line_bytes=1024,
        attempt=1,
        spool=tmp_path / "spool",
        on_superseded=lambda: told.append(True),
    )
    sink.feed(LogStream.out, b"line 1\n")
    raise_fence(keys=[fence_key("sink-fenced")], args=["2", 60])  # the server gave the job to attempt 2
    raise_fence(keys=[fence_key("sink-fenced")], args=["1", 60])  # a late setter cannot lower it
    sink.feed(LogStream.out, b"line 2\n")
    sink.system("the old run's note")
    assert lines(r, "sink-fenced") == [("out", "line 1", 1)]
    assert sink.superseded and told == [True]
    raise_fence(keys=[fence_key("sink-fenced")], args=["end", 60])
    assert r.get(fence_key("sink-fenced")) == b"end"
    r.delete(stream_key("sink-fenced"), fence_key("sink-fenced"))


def test_lines_wait_while_the_fence_is_lost_and_the_copy_makes_the_log_whole(redis_url, tmp_path):
    """A Redis flush mid-job: the fence and the stream are gone. Lines wait (not refused, not
    written without the fence) until the server puts the fence back; the gap is named live; the
    worker's copy, merged at the end, makes the stored log whole and says the lines were restored."""
    import json

    from raiprotocol.keys import fence_key
    from raiprotocol.logwire import FENCE_LUA, Batch
    from raiserver.live.logs import merge, read_copy

    r = redis.Redis.from_url(redis_url)
    raise_fence = r.register_script(FENCE_LUA)
    key = fence_key("sink-flush")
    raise_fence(keys=[key], args=["3", 60])
    spool = tmp_path / "spool.jsonl"
    sink = LogSink(r, "sink-flush", output_bytes=1 << 20, line_bytes=1024, attempt=3, spool=spool)
    for k in range(1, 6):
        sink.feed(LogStream.out, b"line %d\n" % k)
    r.delete(stream_key("sink-flush"), key)  # what FLUSHALL does to this job
    sink.feed(LogStream.out, b"line 6\n")
    assert sink.trouble and not sink.superseded and lines(r, "sink-flush") == []
    raise_fence(keys=[key], args=["3", 60])  # the reaper, from the database
    sink.feed(LogStream.out, b"line 7\n")
    assert sink.close() and sink.whole_in_redis()
    live = lines(r, "sink-flush")
    assert live == [("out", "line 6", 6), ("sys", "lines 1–5 of this log were lost when Redis restarted", 7), ("out", "line 7", 8)]
    stream = [decode_entry(i, f) for i, f in r.xrange(stream_key("sink-flush"))]
    stored = merge(stream, read_copy(spool))
    texts = [(b.n, x) for b in stored for x in b.lines()]
    assert [x for _, x in texts] == [
        "line 1",
        "line 2",
        "line 3",
        "line 4",
        "line 5",
        "line 6",
        "lines 1–5 of this log were lost when Redis restarted; restored from the worker's copy",
        "line 7",
    ]
    assert [n for n, _ in texts] == [1, 2, 3, 4, 5, 6, 7, 8]
    # a line the server numbered anew in the emptied stream collides with the copy: it goes after
    collided = merge([Batch(1, 0.0, "sys", 1, "Cancel requested by ta"), *stream], read_copy(spool))
    assert [b.x for b in collided][-1] == "Cancel requested by ta" and collided[-1].n == 9
    assert json.loads(spool.read_text().splitlines()[0])["n"] == 1
    r.delete(stream_key("sink-flush"), key)
