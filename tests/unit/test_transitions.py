"""A job's state changes only as a named rule allows (jobs/transitions.py), whoever sets it; an
ended job never runs again; and a job knows its facts: the wall limit its build file asks for is
resolved once, at submission, and a view of the queue parses no build file."""

from __future__ import annotations

import itertools

import pytest
from helpers.rows import add_job, add_user, add_worker

from raiprotocol.models import Claim, JobState, JobUpdate
from raiprotocol.spec import parse_spec
from raiserver.config import Settings
from raiserver.errors import Conflict
from raiserver.jobs.finish import STEPS
from raiserver.jobs.lifecycle import claim_job, create_job, update_job
from raiserver.jobs.transitions import POLICY, rule_for
from raiserver.jobs.views import QueueView, job_out
from raiserver.store.tables import Job

ENDED = [s for s in JobState if s.finished]
Q, R = JobState.queued, JobState.running


def test_the_policy_allows_exactly_these_changes():
    allowed = {(a, b) for a, b in itertools.product(JobState, JobState) if a != b and rule_for(a, b) is not None}
    assert allowed == {(Q, R), (R, Q), *((Q, e) for e in ENDED), *((R, e) for e in ENDED)}
    assert [r.name for r in POLICY] == ["claim", "progress", "requeue", "finish"]


@pytest.mark.parametrize("again", [Q, R])
def test_an_ended_job_never_runs_again_whoever_sets_it(db, again):
    job = add_job(db, add_user(db, "alice"))
    job.state = JobState.failed
    db.commit()
    with pytest.raises(ValueError, match="no rule takes a job from failed"):
        job.state = again
    db.rollback()
    db.expire_all()  # a fresh load of the row: still refused
    with pytest.raises(ValueError, match="no rule takes a job from failed"):
        db.get_one(Job, job.id).state = again


def test_a_stale_end_report_is_a_conflict_not_an_overwrite(db, services):
    job = add_job(db, add_user(db, "alice"))
    add_worker(db, "w1")
    claim_job(db, services, job.id, Claim(worker="w1", attempt=1))
    update_job(db, services, job.id, JobUpdate(attempt=1, state=JobState.timed_out))
    with pytest.raises(Conflict):
        update_job(db, services, job.id, JobUpdate(attempt=1, state=JobState.succeeded, exit_code=0))
    assert db.get_one(Job, job.id).state is JobState.timed_out


def test_the_finish_runs_its_steps_in_their_declared_order():
    names = [s.__name__ for s in STEPS]
    # the fence before the log is stored (no line lands after it), the results from the stored log,
    # the commit before anyone is told
    assert names.index("close_fence") < names.index("store_log") < names.index("read_results") < names.index("score_ranked")
    assert names.index("say_verdict") < names.index("commit") < names.index("tell_readers") == len(names) - 1


def _submit(db, services, owner, wall: int | None):
    limits = f"resources:\n  limits:\n    wall_seconds: {wall}\n" if wall else ""
    text = f"rai:\n  version: 0.2\n  image: rai/busybox:latest\n{limits}commands:\n  build:\n    - echo hi\n"
    return create_job(db, services, owner, parse_spec(text), text, "0" * 64, 10, "gpu", "dev")


def test_a_jobs_wall_limit_is_resolved_once_and_views_parse_no_build_file(db, services, monkeypatch):
    alice, bob = add_user(db, "alice"), add_user(db, "bob")
    asked = _submit(db, services, alice, wall=120)
    plain = _submit(db, services, bob, wall=None)
    assert (asked.wall_seconds, plain.wall_seconds) == (120, 0)
    cap = services.settings.wall_seconds
    assert (asked.wall_limit(cap), plain.wall_limit(cap), asked.wall_limit(60)) == (min(120, cap), cap, 60)

    add_worker(db, "w1")
    claim_job(db, services, asked.id, Claim(worker="w1", attempt=1))
    assert asked.claimed_at is not None and asked.last_claimed() == asked.claimed_at

    def no_parse(job: Job):
        raise AssertionError(f"job {job.id}'s build file was parsed for a view")

    monkeypatch.setattr(Job, "build_spec", no_parse)
    view = QueueView(db, Settings())
    out = job_out(db, plain, view)  # waits behind the running one: the queue is played forward
    assert out.state is JobState.queued and out.position == 1
