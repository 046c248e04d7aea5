"""A student over a limit is refused before anything is stored, with a sentence that says which
limit and a Retry-After that is the real wait; staff are exempt unless told otherwise."""

from __future__ import annotations

from datetime import timedelta

import pytest
from helpers.rows import add_job, add_user

from raiprotocol.models import JobState
from raiserver.config import Settings
from raiserver.errors import OverQuota
from raiserver.jobs.quotas import check_quotas
from raiserver.store.db import utcnow
from raiserver.store.tables import Job


def refusal(db, user, settings: Settings) -> OverQuota:
    with pytest.raises(OverQuota) as caught:
        check_quotas(db, user, settings)
    return caught.value


def test_jobs_waiting_or_running_at_once(db):
    settings = Settings(max_active_jobs=2, submissions_per_minute=100)
    alice = add_user(db, "alice")
    first, second = add_job(db, alice, seconds_ago=120), add_job(db, alice, seconds_ago=90)
    second.state = JobState.running
    db.commit()
    err = refusal(db, alice, settings)
    assert err.headers == {"Retry-After": "30"}
    assert "You already have 2 jobs in the queue" in str(err) and first.id in str(err) and second.id in str(err)
    check_quotas(db, add_user(db, "bob"), settings)  # only her own jobs count
    first.state = JobState.succeeded  # a finished job frees its place
    db.commit()
    check_quotas(db, alice, settings)


def test_submissions_per_minute_says_when_to_retry(db):
    settings = Settings(max_active_jobs=100, submissions_per_minute=3)
    alice = add_user(db, "alice")
    for ago in (40, 20, 5):
        job = add_job(db, alice, seconds_ago=ago)
        job.state = JobState.failed  # finished jobs still count against the rate
    db.commit()
    err = refusal(db, alice, settings)
    assert "3 jobs in the last minute" in str(err)
    assert 19 <= err.retry_after <= 21  # the oldest of the three leaves the minute in ~20 s
    db.execute(Job.__table__.update().values(created_at=utcnow() - timedelta(minutes=2)))
    db.commit()
    check_quotas(db, alice, settings)


def test_gpu_minutes_per_day_count_running_jobs_too(db):
    settings = Settings(max_active_jobs=100, submissions_per_minute=100, gpu_minutes_per_day=10)
    alice = add_user(db, "alice")
    done = add_job(db, alice)
    done.gpu_count, done.state = 1, JobState.succeeded
    done.started_at, done.finished_at = utcnow() - timedelta(hours=2, minutes=6), utcnow() - timedelta(hours=2)
    cpu = add_job(db, alice)  # jobs without a GPU do not count
    cpu.state, cpu.started_at, cpu.finished_at = JobState.succeeded, utcnow() - timedelta(hours=1), utcnow()
    db.commit()
    check_quotas(db, alice, settings)
    running = add_job(db, alice)
    running.gpu_count, running.state, running.started_at = 1, JobState.running, utcnow() - timedelta(minutes=5)
    db.commit()
    err = refusal(db, alice, settings)
    assert "You used 11 of your 10 GPU minutes" in str(err) and err.retry_after == 3600


def test_staff_are_exempt_unless_configured(db):
    ta = add_user(db, "tina", role="ta")
    for _ in range(3):
        add_job(db, ta)
    check_quotas(db, ta, Settings(max_active_jobs=1))
    assert "You already have 3 jobs" in str(refusal(db, ta, Settings(max_active_jobs=1, staff_exempt=False)))


def test_ranked_submissions_per_day_are_the_courses_to_limit(db):
    """Issue 46 (C27, the noise lottery): a course may allow N ranked runs a day per student; the
    (N+1)th is refused with the wait, other kinds and other students are not counted, staff exempt."""
    from raiprotocol.spec import parse_course_spec
    from raiserver.jobs.quotas import check_ranked_rate

    course = parse_course_spec("""
rai: {image: rai/ece408:cuda13}
commands: {build: [make m2 ref]}
ranked: {student_files: [new-forward.cu], timed: ./m2, reference: ./ref, per_day: 2}
""")
    settings = Settings()
    alice = add_user(db, "alice")
    add_job(db, alice, kind="final", seconds_ago=3600 * 5)
    add_job(db, alice, kind="dev", seconds_ago=60)
    check_ranked_rate(db, alice, settings, "final", course)  # one final today: a second is allowed
    add_job(db, alice, kind="final", seconds_ago=60)
    with pytest.raises(OverQuota) as caught:
        check_ranked_rate(db, alice, settings, "final", course)
    assert "You submitted 2 'final' runs in the last 24 hours (the course allows 2); try again in 19 h" in str(caught.value)
    assert 68000 < int(caught.value.headers["Retry-After"]) <= 68400
    check_ranked_rate(db, add_user(db, "bob"), settings, "final", course)
    check_ranked_rate(db, add_user(db, "ta", role="ta"), settings, "final", course)
    check_ranked_rate(db, alice, settings, "final", None)  # a kind without a course file: no such limit
