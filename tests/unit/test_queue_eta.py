"""Queue estimates (issue 26: 'about 8 s' behind a `sleep 60`, '≈ 5 s' behind a 15 s job that had
just started): from what runs now, against a typical run and the time limit."""

from __future__ import annotations

from datetime import timedelta

from helpers.rows import add_job, add_user, add_worker

from raiprotocol.models import JobState
from raiserver.config import Settings
from raiserver.jobs.lifecycle import add_phase
from raiserver.jobs.views import QueueView
from raiserver.store.db import utcnow


def finished(db, owner, seconds: float) -> None:
    job = add_job(db, owner)
    job.state, job.started_at = JobState.succeeded, utcnow() - timedelta(seconds=seconds + 60)
    job.finished_at = job.started_at + timedelta(seconds=seconds)
    db.commit()


def running(db, owner, ran: float):
    job = add_job(db, owner)
    job.state, job.worker, job.started_at = JobState.running, "w1", utcnow() - timedelta(seconds=ran)
    add_phase(job, "claimed", "w1")
    job.phases = [{**job.phases[-1], "at": job.started_at.isoformat()}]
    db.commit()
    return job


def test_the_wait_is_what_is_left_of_the_running_job_then_typical_runs(db):
    settings = Settings(wall_seconds=600)
    add_worker(db, slots=1)
    alice = add_user(db, "alice")
    for _ in range(3):
        finished(db, alice, 60)  # a typical run here: 60 s
    running(db, alice, ran=15)
    first, second = add_job(db, alice), add_job(db, alice)
    view = QueueView(db, settings)
    assert view.eta(first, view.position(first)) == 45  # the 15 s job that just started: 45 s left, not '≈ 5 s'
    assert view.eta(second, view.position(second)) == 105


def test_a_job_past_its_typical_time_is_expected_to_run_on_not_to_end_now(db):
    settings = Settings(wall_seconds=600)
    add_worker(db, slots=1)
    bob = add_user(db, "bob")
    finished(db, bob, 8)  # typical: 8 s, but the one running now has run 60 s
    running(db, bob, ran=60)
    waiting = add_job(db, bob)
    view = QueueView(db, settings)
    assert view.eta(waiting, view.position(waiting)) == 30  # half again what it ran, not 'about 8 s'


def test_no_live_worker_no_estimate(db):
    carol = add_user(db, "carol")
    waiting = add_job(db, carol)
    view = QueueView(db, Settings())
    assert view.eta(waiting, view.position(waiting)) is None
