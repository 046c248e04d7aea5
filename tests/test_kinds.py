"""Submission kinds: 'final' needs report.pdf, ranks only before the deadline, and its timing run
is repeated on an idle host so the leaderboard shows a median and a spread. Without the course's
build file installed, a 'final' run is not ranked (issue 23; tests/test_ranked.py ranks them)."""

from __future__ import annotations

import io
import tarfile

import pytest
from helpers import make_project, start_service

pytestmark = pytest.mark.timeout(240)

TIMED = [
    "sh -c 'echo Op Time: 0.0$((RANDOM % 9 + 1))1; echo Op Time: 0.002; echo Correctness: 0.9 Model: ece408'",
    "sh -c 'echo profiling skipped'",
]


def test_final_needs_a_report_and_is_timed_three_times(tmp_path, redis_url):
    svc = start_service(tmp_path / "svc", redis_url, None, "process", slots=2, extra_env={"RAI_TIMING_REPEATS": "3"})
    try:
        bare = make_project(tmp_path / "bare", TIMED)
        res = svc.client("submit", "-p", str(bare), "--kind", "final")
        assert res.returncode == 2 and f"a 'final' submission must include report.pdf (not found in {bare})" in res.stderr
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            tar.add(bare / "rai_build.yml", arcname="rai_build.yml")
        with svc.http() as h:
            r = h.post("/api/v1/jobs", params={"kind": "final"}, content=buf.getvalue())
        assert (r.status_code, r.json()["detail"]) == (422, "a 'final' submission must include report.pdf (not found in the project)")

        proj = make_project(tmp_path / "final", TIMED, files={"report.pdf": "%PDF-1.4 report"})
        res = svc.client("submit", "-p", str(proj), "--kind", "final")
        assert res.returncode == 0, res.stdout + res.stderr
        out = res.stdout
        assert "exclusive run" in out and "✱ Repeat 2 of 3:" in out and "✱ Repeat 3 of 3:" in out
        assert out.splitlines().count("profiling skipped") == 1  # only the timing command is repeated
        assert "Timing runs" in out and "(median shown, spread" in out
        assert "The course has not installed its build file for 'final' yet: this run is kept but does not rank" in out
        with svc.http() as h:
            board = h.get("/api/v1/leaderboard").json()
            unverified = h.get("/api/v1/leaderboard", params={"board": "unverified"}).json()
        assert board == []  # what the program printed never ranks (issue 23)
        assert not unverified[0]["verified"] and unverified[0]["runs"] == 3 and unverified[0]["spread"] is not None
    finally:
        svc.shutdown()


def test_final_after_the_deadline_is_kept_but_does_not_rank(tmp_path, redis_url):
    svc = start_service(tmp_path / "svc", redis_url, None, "process", extra_env={"RAI_DEADLINE": "2020-01-01T00:00:00Z"})
    try:
        proj = make_project(tmp_path / "late", TIMED, files={"report.pdf": "%PDF"})
        res = svc.client("submit", "-p", str(proj), "--kind", "final")
        assert res.returncode == 0
        assert "Submitted after the deadline (2020-01-01 00:00 UTC): this 'final' run is kept but does not rank" in res.stdout
        early = make_project(tmp_path / "dev", TIMED)
        assert svc.client("submit", "-p", str(early)).returncode == 0
        with svc.http() as h:
            board = h.get("/api/v1/leaderboard").json()
            unverified = h.get("/api/v1/leaderboard", params={"board": "unverified"}).json()
        assert board == []  # the late final does not rank, and a dev run never does by default
        assert sorted(e["kind"] for e in unverified) == ["dev"]  # the late final: kept, on no board
    finally:
        svc.shutdown()


def test_a_kind_the_course_did_not_define_is_refused_naming_those_it_has(tmp_path, redis_url):
    """Issue 26: `--kind m9` was accepted silently and stored."""
    svc = start_service(tmp_path / "svc", redis_url, None, "process", slots=1, worker=False)
    try:
        res = svc.client("submit", "-p", str(make_project(tmp_path / "p", ["true"])), "--kind", "m9")
        assert res.returncode != 0
        assert "this course has no submission kind 'm9'; it has: dev, final, m1, m2, m3" in res.stderr, res.stderr
    finally:
        svc.shutdown()


def test_ranking_says_why_unverified_runs_do_not_rank(tmp_path, redis_url):
    """Issue 26: `raiclient ranking` said 'No valid run yet' while the web showed unverified runs."""
    svc = start_service(tmp_path / "svc", redis_url, None, "process", slots=1)
    try:
        assert svc.client("submit", "-p", str(make_project(tmp_path / "p", TIMED))).returncode == 0
        out = svc.client("ranking").stdout
        assert "No run ranks yet. Only runs the service measures rank" in out and "--kind final" in out, out
        assert "1 run(s) of other kinds are on the unverified board" in out, out
    finally:
        svc.shutdown()
