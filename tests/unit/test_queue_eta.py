"""Queue estimates (issue 26: 'about 8 s' behind a `sleep 60`, '≈ 5 s' behind a 15 s job that had
just started): from what runs now, against a typical run and the time limit. Issue 37: a typical
run per kind, each running job's own wall limit, an ETA that counts down at a fixed position, and
why jobs submitted later are ahead."""

from __future__ import annotations

from datetime import timedelta

from helpers.rows import add_job, add_user, add_worker

from raiprotocol.models import JobState
from raiserver.config import Settings
from raiserver.jobs.lifecycle import add_phase
from raiserver.jobs.views import QueueView
from raiserver.store.db import utcnow


def finished(db, owner, seconds: float, kind: str = "dev") -> None:
    job = add_job(db, owner, kind=kind)
    job.state, job.started_at = JobState.succeeded, utcnow() - timedelta(seconds=seconds + 60)
    job.finished_at = job.started_at + timedelta(seconds=seconds)
    db.commit()


def running(db, owner, ran: float, kind: str = "dev", spec: str | None = None):
    job = add_job(db, owner, kind=kind)
    if spec is not None:
        job.spec_yaml = spec
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
    # issue 26: not 'about 8 s' as if it ended now; issue 37: one more typical run (8 s, shown as
    # 10), not half again what it ran (30 s here, and growing with every second it runs)
    assert view.eta(waiting, view.position(waiting)) == 10


def test_no_live_worker_no_estimate(db):
    carol = add_user(db, "carol")
    waiting = add_job(db, carol)
    view = QueueView(db, Settings())
    assert view.eta(waiting, view.position(waiting)) is None


def age(job, seconds: float, db) -> None:
    """Time passes for a running job: it started ``seconds`` earlier than it did."""
    job.started_at -= timedelta(seconds=seconds)
    job.phases = [{**job.phases[-1], "at": job.started_at.isoformat()}]
    db.commit()


def test_a_400_s_job_running_counts_for_what_is_left_of_it_not_the_queues_typical_run(db):
    """Issue 37: with a 400 s job running, waiting positions 1 and 2 both showed '≈ 10 s': the
    queue's typical run (short dev runs) stood for the running ranked one."""
    settings = Settings(wall_seconds=3600)
    add_worker(db, slots=1)
    dana = add_user(db, "dana")
    for _ in range(5):
        finished(db, dana, 10)  # dev runs: 10 s
    for _ in range(2):
        finished(db, dana, 400, kind="final")  # ranked runs: 400 s
    running(db, dana, ran=20, kind="final")
    first, second = add_job(db, dana), add_job(db, dana)
    view = QueueView(db, settings)
    assert view.eta(first, view.position(first)) == 380  # what is left of the ranked run
    assert view.eta(second, view.position(second)) == 390  # then one dev run


def test_a_running_job_is_expected_to_end_by_its_own_wall_limit(db):
    settings = Settings(wall_seconds=3600)
    add_worker(db, slots=1)
    erin = add_user(db, "erin")
    for _ in range(3):
        finished(db, erin, 400)
    spec = (
        "rai:\n  version: 0.2\n  image: rai/busybox:latest\n"
        "resources:\n  limits:\n    wall_seconds: 120\ncommands:\n  build:\n    - sleep 1000\n"
    )
    running(db, erin, ran=100, spec=spec)  # its build file asks for 120 s at most
    waiting = add_job(db, erin)
    view = QueueView(db, settings)
    assert view.eta(waiting, view.position(waiting)) == 20  # not the 300 s its kind's runs would say


def test_the_eta_counts_down_at_a_fixed_position(db):
    """Issue 37: 'about 60 s' grew to 80, 95 and 110 s while the student stayed at position 1."""
    settings = Settings(wall_seconds=3600)
    add_worker(db, slots=1)
    fay = add_user(db, "fay")
    for seconds in (60, 60, 60, 200, 300):
        finished(db, fay, seconds)
    job = running(db, fay, ran=70)  # past the typical 60 s
    waiting = add_job(db, fay)
    seen = []
    for _ in range(4):
        view = QueueView(db, settings)
        assert view.position(waiting) == 1
        seen.append(view.eta(waiting, 1))
        age(job, 20, db)
    # past the typical run it aims at the middle of the longer runs (300 s): 230, then 20 s less
    # each time 20 s pass, never more
    assert seen == [230, 210, 190, 170]


def test_an_overdue_job_does_not_make_the_eta_grow(db):
    settings = Settings(wall_seconds=3600)
    add_worker(db, slots=1)
    gus = add_user(db, "gus")
    for _ in range(3):
        finished(db, gus, 60)
    job = running(db, gus, ran=100)  # longer than any run of its kind
    waiting = add_job(db, gus)
    seen = []
    for _ in range(3):
        view = QueueView(db, settings)
        seen.append(view.eta(waiting, view.position(waiting)))
        age(job, 20, db)
    assert seen == [60, 60, 60]  # one more typical run each time: not 50, 60, 70 (half again what it ran)


def test_a_position_behind_later_jobs_says_why(db):
    """Issue 37: a student's position dropped from 1 to 2 (fair share) and nothing said why."""
    settings = Settings(wall_seconds=3600, staff_priority=True)
    add_worker(db, slots=1)
    hal, ivy, prof = add_user(db, "hal"), add_user(db, "ivy"), add_user(db, "prof", role="instructor")
    served = add_job(db, hal, seconds_ago=100)
    served.state, served.released_at = JobState.succeeded, utcnow() - timedelta(seconds=50)
    db.commit()
    mine = add_job(db, hal, seconds_ago=30)  # hal had a job run 50 s ago
    view = QueueView(db, settings)
    assert view.position(mine) == 1 and view.why(mine, 1) is None  # nobody later is ahead: nothing to explain
    theirs = add_job(db, ivy, seconds_ago=10)  # ivy never had a job run: her turn comes first
    view = QueueView(db, settings)
    assert view.position(mine) == 2
    why = view.why(mine, 2)
    assert why is not None and why.startswith("1 job submitted after yours goes first") and "fair share" in why
    assert view.why(theirs, 1) is None
    add_job(db, prof, seconds_ago=5)  # staff go first
    view = QueueView(db, settings)
    assert view.position(mine) == 3
    why = view.why(mine, 3)
    assert why is not None and why.startswith("2 jobs submitted after yours go first") and "1 of staff" in why


def test_jobs_running_on_every_slot_never_make_the_wait_zero(db):
    """Seen on the web queue: four `sleep 300` jobs on four slots, the only finished run a 1 s
    one, and the two waiting jobs both showed '≈ 0 s'."""
    settings = Settings(wall_seconds=3600)
    add_worker(db, slots=4)
    ida = add_user(db, "ida")
    finished(db, ida, 1)
    for ran in (9, 16, 22, 26):
        running(db, ida, ran=ran)
    first, second = add_job(db, ida), add_job(db, ida)
    view = QueueView(db, settings)
    assert view.eta(first, view.position(first)) == 10
    assert view.eta(second, view.position(second)) == 10  # four slots: both start when the next one frees


def test_a_job_of_another_queue_on_the_same_worker_holds_its_slot(db):
    """A worker of two queues runs one set of slots: a gpu job waits for the cpu job that holds the
    only slot (its ETA said 'now' while the cpu job ran)."""
    settings = Settings(wall_seconds=600)
    add_worker(db, queues=("gpu", "cpu"), slots=1)
    alice = add_user(db, "alice")
    for _ in range(3):
        finished(db, alice, 60)
    cpu = running(db, alice, ran=15)
    cpu.queue = "cpu"
    db.commit()
    waiting = add_job(db, alice)
    view = QueueView(db, settings)
    assert view.eta(waiting, view.position(waiting)) >= 30
