"""The same whole path on PostgreSQL, and through the process executor (hosts without Docker)."""

from __future__ import annotations

import tarfile

import pytest
from helpers import ROOT, make_project

pytestmark = pytest.mark.timeout(240)


def test_postgres_backed_service_runs_hello_and_fails_cleanly(pg_service, tmp_path):
    res = pg_service.client("submit", "-p", str(ROOT / "examples" / "hello"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "step 3 of 3" in res.stdout and "Job succeeded" in res.stdout
    proj = make_project(tmp_path / "p", ["sh -c 'exit 3'"])
    res = pg_service.client("submit", "-p", str(proj))
    assert res.returncode == 3
    hist = pg_service.client("history")
    assert "succeeded" in hist.stdout and "failed" in hist.stdout


def test_process_executor_runs_the_same_build_file(process_service, tmp_path):
    res = process_service.client("submit", "-p", str(ROOT / "examples" / "hello"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "started the job as processes (no container" in res.stdout
    assert "step 3 of 3" in res.stdout and res.stderr.count("on stderr") == 3
    jid = next(ln.split()[2] for ln in res.stdout.splitlines() if " queued on " in ln)
    out = tmp_path / "b.tgz"
    assert process_service.client("download", jid, "-o", str(out)).returncode == 0
    with tarfile.open(out) as tar:
        assert tar.extractfile("result.txt").read() == b"hello from rai\n"


def test_process_executor_timeout_kills_the_whole_process_group(process_service, tmp_path):
    proj = make_project(tmp_path / "p", ["sh -c 'sleep 300 & sleep 300'"], extra="resources:\n  limits:\n    wall_seconds: 2\n")
    res = process_service.client("submit", "-p", str(proj))
    assert res.returncode == 124, res.stdout + res.stderr
    import subprocess

    left = subprocess.run(["pgrep", "-f", "sleep 300"], capture_output=True, text=True).stdout.split()
    assert left == [], "a child of the timed-out job survived"
