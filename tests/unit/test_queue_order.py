"""The positions a student is shown are the order in which the fair-share release really sends jobs, under
every fairness setting."""

from __future__ import annotations

import pytest
from helpers.rows import add_job, add_user, add_worker

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
