"""The benches that had no run in CI, each in a reduced form, so that none of them rots (issue 52:
bench/watchers.py and bench/deadline_rush.py had stopped running unnoticed): each runs as a user
runs it, from its command line, against the service as it starts today, and what it prints is
checked for the guarantee it measures. Their full runs' figures are in bench/*.txt."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import free_port

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.timeout(300), pytest.mark.alone]


def bench(name: str, *args: str, timeout: float = 240) -> str:
    res = subprocess.run(
        [sys.executable, str(ROOT / "bench" / name), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    print(res.stdout[-4000:])
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return res.stdout


def test_the_log_route_goes_back_to_no_module_but_to_give_its_stream_slot_back():
    """Issue 47's measure of shape, kept: a job id through GET /jobs/{id}/log enters each module
    once, but the live feed, where the stream's slot is taken and at the end given back."""
    out = bench("route_trace.py")
    path = re.search(r"^module path: (.*)$", out, re.M)
    assert path is not None, out
    modules = path.group(1).split(" -> ")
    revisited = [m for i, m in enumerate(modules) if m in modules[:i]]
    assert revisited == ["live.feed"], modules
    assert modules[-1] == "live.feed" and modules.count("access.permissions") == 1, modules


def test_the_release_pass_bench_orders_every_waiting_job(pg_url):
    out = bench("release_pass.py", "--jobs", "3000", "--lines", "20,80", "--rounds", "3")
    rows = [line.split()[0] for line in out.splitlines() if re.match(r"^\s*\d+\s+\d", line)]
    assert rows == ["20", "80"], out  # the bench asserts every waiting job is in the order


def test_the_watchers_bench_gets_every_line_to_every_watcher():
    out = bench("watchers.py", "-w", "20", "-j", "2", "-n", "20", "-p", "2")
    assert "broken streams: 0" in out, out
    assert "every line exactly once: 20 of 20 watchers" in out, out


def test_the_memory_bench_samples_the_server_and_the_worker():
    out = bench("server_memory.py", "-n", "40", "--every", "20")
    samples = [line for line in out.splitlines() if re.match(r"^\s+\d+ jobs\s", line)]
    assert len(samples) == 2 and all("server" in s and "worker" in s for s in samples), out
    assert re.search(r"^server: RSS .* KB/job", out, re.M), out


def test_the_redis_outage_bench_ends_every_job_with_its_log():
    out = bench("redis_outage.py", "--quick", "--pause", "3", "--port", str(free_port()))
    jobs = re.search(r"^jobs: \{(.*)\}; not ended after 120 s: (\d+)$", out, re.M)
    assert jobs is not None and jobs.group(2) == "0", out  # none stuck
    assert re.fullmatch(r"'succeeded': \d+", jobs.group(1)), out  # none failed, none ran twice into an error
    logs = re.search(r"^logs with the job's line: (\d+) of (\d+)$", out, re.M)
    assert logs is not None and logs.group(1) == logs.group(2) != "0", out
