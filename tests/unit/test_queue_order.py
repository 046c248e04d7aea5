"""The positions a student is shown are the order in which the fair-share release really sends jobs, under
every fairness setting."""

from __future__ import annotations

import pytest
from helpers.rows import add_job, add_user, add_worker

from raiprotocol.models import JobState
from raiserver.config import Settings
from raiserver.jobs.lifecycle import release_jobs
from raiserver.jobs.views import QueueView


def released_order(db, settings: Settings, slots: int) -> list[str]:
    sent: list[str] = []
    release_jobs(db, lambda job: sent.append(job.id), settings.worker_dead_after, settings.staff_priority, set(settings.priority_kinds))
    return sent


@pytest.mark.parametrize("staff_priority,priority_kinds", [(False, ""), (True, ""), (False, "final"), (True, "final")])
def test_positions_shown_are_the_release_order(db, staff_priority, priority_kinds):
    settings = Settings(staff_priority=staff_priority, priority_kinds=priority_kinds)
    alice, bob = add_user(db, "alice"), add_user(db, "bob")
    ta = add_user(db, "tina", role="ta")
    jobs = [
        add_job(db, alice, seconds_ago=50),
        add_job(db, bob, seconds_ago=40, kind="final"),
        add_job(db, ta, seconds_ago=30),
        add_job(db, alice, seconds_ago=20),
        add_job(db, bob, seconds_ago=10),
    ]
    view = QueueView(db, settings)
    shown = sorted(jobs, key=lambda j: view.position(j))
    assert [view.position(j) for j in shown] == [1, 2, 3, 4, 5]
    add_worker(db, slots=len(jobs))
    assert released_order(db, settings, len(jobs)) == [j.id for j in shown]


def test_a_ranked_run_is_released_on_the_reserved_place_however_busy_the_slots(db):
    """Issue 32: a ranked run does not wait in the queue behind shared jobs, nor hold a slot: each
    live host has one reserved place for it. A second ranked run waits for a place to free."""
    settings = Settings(staff_priority=False)
    students = [add_user(db, f"s{i}") for i in range(4)]
    add_worker(db, "w1", slots=2)
    shared = [add_job(db, s, seconds_ago=60 - i) for i, s in enumerate(students)]
    ranked = add_job(db, students[0], kind="m2", seconds_ago=10, reserved=True)
    second = add_job(db, students[1], kind="m2", seconds_ago=5, reserved=True)
    view = QueueView(db, settings)
    assert view.position(ranked) == 1 and view.position(second) == 2 and view.position(shared[2]) == 3
    assert released_order(db, settings, 2) == [shared[0].id, shared[1].id, ranked.id]
    view = QueueView(db, settings)
    assert view.position(second) == 1 and view.position(shared[2]) == 1  # the next of each line
    assert released_order(db, settings, 2) == []  # both slots and the one reserved place are held
    add_worker(db, "w2", slots=1)  # a second host: one more slot and one more reserved place
    assert released_order(db, settings, 3) == [shared[2].id, second.id]


def test_a_worker_of_two_queues_has_its_slots_handed_out_once(db):
    """A worker serving two queues runs one set of slots: a job running from one queue holds a slot
    the other queue cannot have too (counted per queue, both queues were given every slot, and the
    jobs released past them waited unclaimed, ahead of fairer ones). A job running on a worker
    that does not serve the queue holds none of its slots."""
    settings = Settings(staff_priority=False)
    alice, bob = add_user(db, "alice"), add_user(db, "bob")
    w2 = add_worker(db, "w2", queues=("gpu", "cpu"), slots=2)
    cpu = [add_job(db, alice, queue="cpu", seconds_ago=30 - i) for i in range(2)]
    assert released_order(db, settings, 2) == [j.id for j in cpu]
    for job in cpu:
        job.state, job.worker = JobState.running, w2.name
    db.commit()
    gpu = add_job(db, bob, queue="gpu", seconds_ago=5)
    assert released_order(db, settings, 2) == []  # both of w2's slots run cpu jobs
    add_worker(db, "w3", queues=("cpu",), slots=1)
    cpu[1].worker = "w3"  # one of them runs elsewhere: w2 has a slot for the gpu queue again
    db.commit()
    assert released_order(db, settings, 2) == [gpu.id]
