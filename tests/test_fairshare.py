"""A simulated deadline rush: round-robin release, nobody behind more than one job of another
student, quotas hold, nothing lost, every job ends."""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path

import pytest
from helpers import start_service

from raiprotocol.profile import read_profile_file

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from deadline_rush import max_behind_one_user, run_rush  # noqa: E402

pytestmark = pytest.mark.timeout(400)


def test_deadline_rush_is_fair_and_loses_nothing(tmp_path, redis_url):
    svc = start_service(
        tmp_path,
        redis_url,
        None,
        "process",
        slots=2,
        worker=False,
        extra_env={"RAI_MAX_ACTIVE_JOBS": "10", "RAI_SUBMISSIONS_PER_MINUTE": "1000", "RAI_STAFF_PRIORITY": "false"},
    )
    try:
        p = read_profile_file(svc.profile)
        jobs = run_rush(
            svc.url,
            (p.access_key, p.secret_key),
            light=40,
            heavy=4,
            per_heavy=10,
            timeout=300,
            start_workers=lambda: svc.start_worker("w1"),
        )
    finally:
        svc.shutdown()
    assert len(jobs) == 80
    assert all(j["state"] == "succeeded" for j in jobs), {j["state"] for j in jobs}
    assert max_behind_one_user(jobs) <= 0  # at most one job of any other student per own job ahead
    # round robin: each heavy student's first job (submitted first), then every one-job student,
    # then the heavy students' second jobs, and so on
    release = {j["id"]: datetime.fromisoformat(j["released_at"]) for j in jobs}
    last_light = max(release[j["id"]] for j in jobs if j["owner"].startswith("light"))
    for name in {j["owner"] for j in jobs if j["owner"].startswith("heavy")}:
        mine = sorted(release[j["id"]] for j in jobs if j["owner"] == name)
        assert mine[0] < last_light < mine[1], f"{name}: not round-robin"
