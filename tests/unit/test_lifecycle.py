"""A job's life on the server: a claim makes it running once, a stale or second claim is refused,
the worker's final update ends it (and a cancel wins over the failure it caused), a lost run goes
back in the queue a bounded number of times. The database holds each state before anyone is told."""

from __future__ import annotations

from datetime import timedelta

import pytest
from helpers.rows import add_job, add_user, add_worker

from raiprotocol.logwire import END
from raiprotocol.models import Claim, JobState, JobUpdate
from raiserver.errors import Conflict, NotFound
from raiserver.jobs.lifecycle import cancel_job, claim_job, reap, renew_lease, update_job


def log_of(services, job_id: str) -> list[tuple[str, str]]:
    return [(b.s, b.x) for page in services.logs.pages(job_id) for b in page]


def end_marker(services, job_id: str) -> str | None:
    from raiprotocol.keys import stream_key
    from raiprotocol.logwire import decode_entry

    ends = [b.x for b in (decode_entry(i, f) for i, f in services.redis.sync.xrange(stream_key(job_id))) if b.s == END]
    return ends[-1] if ends else None


def test_claim_then_finish(db, services):
    job = add_job(db, add_user(db, "alice"))
    add_worker(db, "w1")
    grant = claim_job(db, services, job.id, Claim(worker="w1", attempt=1))
    assert (grant.commands, grant.attempt) == (["echo hi"], 1)
    assert job.state is JobState.running and job.worker == "w1"
    assert [p["name"] for p in job.phases] == ["claimed"]
    with pytest.raises(Conflict, match="stale delivery"):
        claim_job(db, services, job.id, Claim(worker="w1", attempt=2))
    with pytest.raises(Conflict, match="running on w1"):  # its run holds the lease: nobody else may take it
        claim_job(db, services, job.id, Claim(worker="w2", attempt=1))

    services.logs.system(job.id, "Op Time: 1.5 ms")
    update_job(db, services, job.id, JobUpdate(attempt=1, state=JobState.succeeded, exit_code=0))
    assert job.state is JobState.succeeded and job.finished_at is not None
    assert end_marker(services, job.id) == "succeeded"  # readers are told after the commit
    assert services.storage.log_path(job.id).exists()
    with pytest.raises(Conflict, match="is succeeded on attempt 1"):
        update_job(db, services, job.id, JobUpdate(attempt=1, state=JobState.failed, exit_code=1))
    with pytest.raises(Conflict, match="already succeeded"):
        claim_job(db, services, job.id, Claim(worker="w1", attempt=1))
    with pytest.raises(NotFound):
        claim_job(db, services, "nope", Claim(worker="w1", attempt=1))


def test_a_cancel_wins_over_the_failure_it_caused(db, services):
    alice = add_user(db, "alice")
    job = add_job(db, alice)
    add_worker(db, "w1")
    claim_job(db, services, job.id, Claim(worker="w1", attempt=1))
    cancel_job(db, services, job, alice)
    assert job.state is JobState.running and job.cancel_requested  # the worker stops it
    assert ("sys", "Cancel requested by alice; stopping its commands") in log_of(services, job.id)
    update_job(db, services, job.id, JobUpdate(attempt=1, state=JobState.failed, exit_code=137, message="killed"))
    assert job.state is JobState.cancelled


def test_a_queued_job_is_cancelled_at_once(db, services):
    alice = add_user(db, "alice")
    job = add_job(db, alice)
    cancel_job(db, services, job, alice)
    assert job.state is JobState.cancelled and job.message == "Cancelled by alice before it started"
    assert end_marker(services, job.id) == "cancelled"


def test_a_lost_run_is_requeued_then_given_up(db, services):
    job = add_job(db, add_user(db, "alice"))
    add_worker(db, "w1")
    claim_job(db, services, job.id, Claim(worker="w1", attempt=1))
    assert reap(db, services) == 0  # its run holds the lease (a claim starts it)
    job.lease_at -= timedelta(seconds=51)  # then the run stops renewing it (lease 45 s + margin 5 s)
    db.commit()
    assert reap(db, services) == 1
    assert (job.state, job.attempt, job.worker) == (JobState.queued, 2, None)
    assert any("goes back in the queue (attempt 2 of 2)" in x for _, x in log_of(services, job.id))
    with pytest.raises(Conflict, match="stale delivery"):  # the old delivery cannot run it twice
        claim_job(db, services, job.id, Claim(worker="w1", attempt=1))
    claim_job(db, services, job.id, Claim(worker="w1", attempt=2))
    job.lease_at -= timedelta(seconds=51)
    db.commit()
    reap(db, services)
    assert job.state is JobState.error and "gave up after 2 attempts" in job.message


def test_waiting_in_slurm_is_shown_queued_and_a_node_failure_requeues(db, services):
    from raiserver.jobs.views import QueueView, job_out

    job = add_job(db, add_user(db, "alice"))
    add_worker(db, "w1")
    claim_job(db, services, job.id, Claim(worker="w1", attempt=1))
    update_job(db, services, job.id, JobUpdate(attempt=1, state=JobState.running, waiting="Queued in Slurm: Resources"))
    out = job_out(db, job, QueueView(db, services.settings))
    assert (job.state, out.state, out.waiting) == (JobState.running, JobState.queued, "Queued in Slurm: Resources")
    update_job(db, services, job.id, JobUpdate(attempt=1, state=JobState.queued, message="Slurm: NODE_FAIL"))
    assert (job.state, job.attempt, job.waiting) == (JobState.queued, 2, None)


def _fence(services, job_id: str) -> bytes | None:
    from raiprotocol.keys import fence_key

    return services.redis.sync.get(fence_key(job_id))


def test_the_lease_decides_not_the_workers_heartbeat(db, services):
    """A worker whose main process is paused sends no heartbeat while its run goes on renewing the
    lease: the job stays. A run that renews only through Redis (its HTTP cut off) stays too."""
    from raiprotocol.keys import lease_key

    job = add_job(db, add_user(db, "alice"))
    w1 = add_worker(db, "w1")
    claim_job(db, services, job.id, Claim(worker="w1", attempt=1))
    assert _fence(services, job.id) == b"1"
    w1.last_seen -= timedelta(seconds=600)  # heartbeats stopped long ago
    db.commit()
    assert reap(db, services) == 0 and job.state is JobState.running
    job.lease_at -= timedelta(seconds=600)  # and the HTTP renewals too, but Redis has one
    db.commit()
    services.redis.sync.set(lease_key(job.id), "1", px=50_000)
    assert reap(db, services) == 0 and job.state is JobState.running
    with pytest.raises(Conflict, match="running on w1"):  # nor may another worker take it
        claim_job(db, services, job.id, Claim(worker="w2", attempt=1))
    services.redis.sync.delete(lease_key(job.id))
    assert reap(db, services) == 1 and job.state is JobState.queued
    assert _fence(services, job.id) == b"2"  # the old run's next line is refused


def test_a_stalled_server_gives_every_run_a_fresh_window(db, services):
    from raiserver.store.db import utcnow

    job = add_job(db, add_user(db, "alice"))
    add_worker(db, "w1")
    claim_job(db, services, job.id, Claim(worker="w1", attempt=1))
    job.lease_at -= timedelta(seconds=600)  # nothing heard while the server was stopped
    db.commit()
    assert reap(db, services, awake_since=utcnow() - timedelta(seconds=3)) == 0  # it just woke up
    assert reap(db, services, awake_since=utcnow() - timedelta(seconds=60)) == 1  # a full window later


def test_a_late_end_report_is_kept_not_run_again(db, services):
    """The run ended, but its report came after the job was put back in the queue (the server was
    stopped, or cut off): nobody claimed it again yet, so the result stands and nothing reruns."""
    job = add_job(db, add_user(db, "alice"))
    add_worker(db, "w1")
    claim_job(db, services, job.id, Claim(worker="w1", attempt=1))
    job.lease_at -= timedelta(seconds=600)
    db.commit()
    assert reap(db, services) == 1 and job.attempt == 2
    update_job(db, services, job.id, JobUpdate(attempt=1, state=JobState.succeeded, exit_code=0))
    assert job.state is JobState.succeeded and _fence(services, job.id) == b"end"
    assert any("had ended after all (succeeded)" in x for _, x in log_of(services, job.id))
    with pytest.raises(Conflict, match="already succeeded"):  # the re-release's delivery runs nothing
        claim_job(db, services, job.id, Claim(worker="w1", attempt=2))
    # once another run claimed the job (issue 51: the worker froze between its command's end and its
    # report), the finished run's verdict still stands, and the rerun is stopped at its next renewal
    other = add_job(db, add_user(db, "bob"))
    claim_job(db, services, other.id, Claim(worker="w1", attempt=1))
    other.lease_at -= timedelta(seconds=600)
    db.commit()
    reap(db, services)
    claim_job(db, services, other.id, Claim(worker="w2", attempt=2))
    update_job(db, services, other.id, JobUpdate(attempt=1, state=JobState.failed, exit_code=3))
    assert other.state is JobState.failed and other.exit_code == 3 and _fence(services, other.id) == b"end"
    assert any("attempt 2 on w2 is stopped" in x for _, x in log_of(services, other.id))
    with pytest.raises(Conflict, match="already failed"):
        renew_lease(db, services, other.id, "w2", 2)
    # but a worker's or the server's trouble (an error) of the old run does not end the rerun
    third = add_job(db, add_user(db, "carol"))
    claim_job(db, services, third.id, Claim(worker="w1", attempt=1))
    third.lease_at -= timedelta(seconds=600)
    db.commit()
    reap(db, services)
    claim_job(db, services, third.id, Claim(worker="w2", attempt=2))
    with pytest.raises(Conflict, match="stale"):
        update_job(db, services, third.id, JobUpdate(attempt=1, state=JobState.error, message="worker w1 error"))
    assert third.state is JobState.running


def test_a_takeover_on_the_same_worker_is_a_new_attempt(db, services):
    """The pool process died with the run, and Celery delivered the job again to the same worker:
    the new run gets an attempt of its own, so the lost one could never write beside it."""
    job = add_job(db, add_user(db, "alice"))
    add_worker(db, "w1")
    claim_job(db, services, job.id, Claim(worker="w1", attempt=1))
    grant = claim_job(db, services, job.id, Claim(worker="w1", attempt=1))
    assert grant.attempt == 2 and job.attempt == 2 and _fence(services, job.id) == b"2"
    assert any("Restarting on w1 as attempt 2" in x for _, x in log_of(services, job.id))


def test_a_release_nobody_claims_goes_again_within_30_s(db, services):
    from raiserver.jobs.lifecycle import release_again
    from raiserver.store.db import utcnow

    job = add_job(db, add_user(db, "alice"))
    job.released_at = utcnow() - timedelta(seconds=5)
    db.commit()
    assert release_again(db, services) == 0
    job.released_at = utcnow() - timedelta(seconds=services.settings.release_again_seconds + 1)
    db.commit()
    assert release_again(db, services) == 1
    assert (job.attempt, job.released_at) == (2, None) and services.settings.release_again_seconds <= 30
    with pytest.raises(Conflict, match="stale delivery"):  # the lost message, should it come back
        claim_job(db, services, job.id, Claim(worker="w1", attempt=1))


def test_fences_lost_with_redis_come_back_from_the_database(db, services):
    from raiprotocol.keys import fence_key
    from raiserver.jobs.lifecycle import restore_fences

    job = add_job(db, add_user(db, "alice"))
    add_worker(db, "w1")
    claim_job(db, services, job.id, Claim(worker="w1", attempt=1))
    services.redis.sync.delete(fence_key(job.id))  # a flush
    assert restore_fences(db, services) >= 1 and _fence(services, job.id) == b"1"
