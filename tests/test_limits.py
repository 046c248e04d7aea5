"""Limits students can see (issue 36): jobs active, submissions left this minute and in 24 hours,
GPU minutes left and late days left, in `raiclient limits`, `raiclient kinds` and on the student's
page, and the daily limit refusing with one line; on PostgreSQL."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import fresh_pg, make_project, start_service
from test_web import login

pytestmark = pytest.mark.timeout(300)
SHOTS = Path("/tmp/shots36a")
ENV = {
    "RAI_MAX_ACTIVE_JOBS": "3",
    "RAI_SUBMISSIONS_PER_MINUTE": "10",
    "RAI_SUBMISSIONS_PER_DAY": "3",
    "RAI_GPU_MINUTES_PER_DAY": "30",
    "RAI_LATE_DAYS": "3",
}


def test_students_see_what_they_have_left(tmp_path, redis_url, browser):
    gen = fresh_pg()
    svc = start_service(tmp_path / "svc", redis_url, next(gen), "process", worker=False, extra_env=ENV)
    try:
        dana = {"RAI_PROFILE": str(svc.add_user("dana", "student"))}
        proj = make_project(tmp_path / "p", ["true"])
        res = svc.client("limits", env=dana)
        assert res.returncode == 0, res.stderr
        assert res.stdout.splitlines() == [
            "Jobs waiting or running: 3 left of 3 (0 now)",
            "Submissions this minute: 10 left of 10",
            "Submissions in 24 h: 3 left of 3",
            "GPU minutes in 24 h: 30 left of 30",
            "Late days: 3 left of 3",
        ]
        ids = []
        for _ in range(2):
            out = svc.client("submit", "-d", "-p", str(proj), env=dana)
            assert out.returncode == 0, out.stderr
            ids.append(re.search(r"Job (\w{26}) queued", out.stdout).group(1))
        res = svc.client("kinds", env=dana)
        assert "Jobs waiting or running: 1 left of 3 (2 now)" in res.stdout and "Submissions in 24 h: 1 left of 3" in res.stdout
        assert "Submissions this minute: 8 left of 10" in res.stdout
        assert svc.client("submit", "-d", "-p", str(proj), env=dana).returncode == 0
        assert svc.client("cancel", ids[0], env=dana).returncode == 0
        res = svc.client("submit", "-d", "-p", str(proj), env=dana)
        assert res.returncode != 0
        assert re.search(
            r"You submitted 3 jobs in the last 24 hours \(the limit is 3\); try again in (23 h 59 min|24 h 0 min)", res.stderr
        )  # as many seconds as are left of the day: 86,400 within the second, res.stderr
        assert svc.client("limits", env=dana).stdout.splitlines()[:3] == [
            "Jobs waiting or running: 1 left of 3 (2 now)",
            "Submissions this minute: 7 left of 10",
            "Submissions in 24 h: 0 left of 3",
        ]
        assert svc.client("limits").stdout.strip() == "Staff: no submission limit applies to you"

        SHOTS.mkdir(parents=True, exist_ok=True)
        page = login(browser, svc, Path(dana["RAI_PROFILE"]))
        page.goto(f"{svc.url}/users/dana")
        limits = page.inner_text("#limits")
        for text in ("2 of 3", "7 submissions left of 10", "0 submissions left of 3", "30 left of 30 (24 h)", "3 left of 3"):
            assert text in limits, limits
        page.screenshot(path=str(SHOTS / "user-limits.png"), full_page=True)
        page.close()
    finally:
        svc.shutdown()
        next(gen, None)
