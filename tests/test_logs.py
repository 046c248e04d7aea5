"""The log pipeline on real Redis servers, 7.x and 6.2: line numbering shared by several writers,
the output cap, carriage-return folding, paged archive and replay, and a whole job on 6.2."""

from __future__ import annotations

import time

import pytest
import redis
from helpers import make_project, read_log, start_service

from raiprotocol.keys import stream_key
from raiprotocol.logwire import END
from raiprotocol.models import LogStream
from raiserver.live.logs import LogStore
from raiserver.store.redisconn import RedisService
from raiserver.store.storage import Storage
from raiworker.logsink import LogSink


def _store(url: str, tmp_path) -> LogStore:
    return LogStore(RedisService(url), Storage(tmp_path / "storage"), ttl=60)


def test_writers_share_one_exact_numbering(any_redis, tmp_path):
    r = redis.Redis.from_url(any_redis)
    job = f"num-{tmp_path.name}"
    store = _store(any_redis, tmp_path)
    a = LogSink(r, job, 10**9, 65536)
    b = LogSink(r, job, 10**9, 65536)
    store.system(job, "Running: something")
    a.feed(LogStream.out, b"1\n2\n3\n")
    b.feed(LogStream.err, b"e1\ne2\n")
    store.system(job, "between")
    a.feed(LogStream.out, b"4\n")
    store.end(job, "succeeded")
    texts = [t for page in store.pages(job) for batch in page for t in batch.lines()]
    assert texts == ["Running: something", "1", "2", "3", "e1", "e2", "between", "4"]
    # resuming after any line gives exactly the lines after it
    for k in range(len(texts) + 1):
        rest = [t for page in store.pages(job, after=k) for batch in page for t in batch.lines()]
        assert rest == texts[k:], k
    ids = [int(i.decode().split("-")[1]) for i, _ in r.xrange(stream_key(job))]
    assert ids == [1, 4, 6, 7, 8, 9], "entry ids are the numbers of their last lines; the end marker takes one"
    assert r.xrevrange(stream_key(job), count=1)[0][1][b"s"] == END.encode()


def test_empty_lines_cannot_flood_past_the_cap(any_redis, tmp_path):
    r = redis.Redis.from_url(any_redis)
    job = f"yes-{tmp_path.name}"
    sink = LogSink(r, job, output_bytes=10**9, line_bytes=65536, output_lines=1000)
    for _ in range(50):  # `yes ''`: 50 chunks of 8192 empty lines
        sink.feed(LogStream.out, b"\n" * 8192)
    sink.flush()
    store = _store(any_redis, tmp_path)
    batches = [b for page in store.pages(job) for b in page]
    assert sum(b.c for b in batches if b.s == "out") == 1000
    assert [b.x for b in batches if b.s == "sys"] == ["output truncated after 1,000 lines; the job keeps running"]


def test_byte_cap_and_long_lines(any_redis, tmp_path):
    r = redis.Redis.from_url(any_redis)
    job = f"bytes-{tmp_path.name}"
    sink = LogSink(r, job, output_bytes=100, line_bytes=16)
    sink.feed(LogStream.out, b"x" * 40 + b"\n")  # one long line: cut in pieces of 16
    sink.feed(LogStream.out, b"y" * 200)  # no end of line in sight: emitted in pieces too
    sink.flush()
    texts = [(b.s, t) for page in _store(any_redis, tmp_path).pages(job) for b in page for t in b.lines()]
    assert texts[:3] == [("out", "x" * 16), ("out", "x" * 16), ("out", "x" * 8)]
    assert all(len(t) <= 16 for _, t in texts if _ == "out")
    assert texts[-1] == ("sys", "output truncated after 100 bytes; the job keeps running")
    assert sum(len(t) + 1 for s, t in texts if s == "out") <= 100


def test_carriage_returns_fold_like_a_terminal(any_redis, tmp_path):
    r = redis.Redis.from_url(any_redis)
    job = f"cr-{tmp_path.name}"
    sink = LogSink(r, job, 10**9, 65536)
    for k in range(0, 101):  # a progress bar redrawn 101 times, in as many reads
        sink.feed(LogStream.out, f"\r[{'#' * (k // 10):10}] {k}%".encode())
    sink.feed(LogStream.out, b"\ndone\r\nwindows line\r\n")
    sink.flush()
    texts = [t for page in _store(any_redis, tmp_path).pages(job) for b in page for t in b.lines()]
    assert texts == ["[##########] 100%", "done", "windows line"]


def test_a_long_progress_bar_shows_now_and_then(any_redis, tmp_path):
    r = redis.Redis.from_url(any_redis)
    job = f"bar-{tmp_path.name}"
    sink = LogSink(r, job, 10**9, 65536, progress_seconds=0.2)
    for k in range(8):
        sink.feed(LogStream.out, f"\rtraining {k}/7".encode())
        time.sleep(0.1)
    sink.feed(LogStream.out, b"\n")
    texts = [t for page in _store(any_redis, tmp_path).pages(job) for b in page for t in b.lines()]
    assert texts[-1] == "training 7/7"
    assert 2 <= len(texts) <= 5, texts  # a few snapshots on the way, not one line per redraw


def test_archive_and_replay_go_page_by_page(any_redis, tmp_path):
    r = redis.Redis.from_url(any_redis)
    job = f"big-{tmp_path.name}"
    sink = LogSink(r, job, 10**9, 65536)
    chunk = "".join(f"line {i}\n" for i in range(5000)).encode()
    for _ in range(40):
        sink.feed(LogStream.out, chunk)
    store = _store(any_redis, tmp_path)
    assert store.archive(job) == 200_000
    pages, offset, after = 0, 0, 123_456
    seen = after
    while offset >= 0:
        batches, offset = store.stored_page(job, offset, after, max_bytes=64 * 1024)
        for b in batches:
            assert b.n == seen + 1
            seen = b.last
        pages += 1
    assert seen == 200_000 and pages > 10, "the replay came in many bounded pages, every line once"
    first = next(store.stored(job, after=123_456))
    assert first.n == 123_457 and first.lines()[0] == f"line {123_456 % 5000}"
    # deleted part way through a reading (retention, its owner): the reading breaks, it does not end as if whole
    _, offset = store.stored_page(job, 0, 0, max_bytes=64 * 1024)
    store.storage.log_path(job).unlink()
    with pytest.raises(FileNotFoundError):
        store.stored_page(job, offset, 0)
    assert store.stored_page(job, 0, 0) == ([], -1)  # a log never stored: nothing, and the end


def test_a_whole_job_and_exact_resume_on_this_redis(any_redis, tmp_path):
    svc = start_service(tmp_path, any_redis, None, "process", slots=1)
    try:
        proj = make_project(tmp_path / "p", ["sh -c 'for k in $(seq 1 50); do echo line $k; echo err $k >&2; done'"])
        res = svc.client("submit", "-p", str(proj))
        assert res.returncode == 0, res.stdout + res.stderr
        assert [line for line in res.stdout.splitlines() if line.startswith("line")] == [f"line {k}" for k in range(1, 51)]
        jid = res.stdout.split("Job ", 1)[1].split()[0]
        with svc.http() as h:
            lines = read_log(h, jid)
            assert [line["n"] for line in lines] == list(range(1, len(lines) + 1))
            assert read_log(h, jid, last_event_id=17) == lines[17:]
    finally:
        svc.shutdown()


def test_logs_resume_after_a_given_line(docker_service, tmp_path):
    """Issue 28: after the client was killed, `raiclient logs JOB --follow` replayed from line 1."""
    from helpers import make_project, read_log

    proj = make_project(tmp_path / "p", ["sh -c 'for k in $(seq 1 10); do echo n$k; done'"])
    res = docker_service.client("submit", "-p", str(proj))
    jid = next(line.split()[2] for line in res.stdout.splitlines() if " queued on " in line)
    with docker_service.http() as h:
        n5 = next(line["n"] for line in read_log(h, jid) if line["text"] == "n5")
    for args in (["logs", jid, "--after", str(n5)], ["logs", jid, "--follow", "--after", str(n5)]):
        out = docker_service.client(*args).stdout
        printed = [line for line in out.splitlines() if line.startswith("n")]
        assert printed == [f"n{k}" for k in range(6, 11)], (args, out)
        assert "Running:" not in out
