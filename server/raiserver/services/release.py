"""The fair-share release: as many queued jobs as there are free slots handed to Celery, in fair
order (``jobs/fairshare.py``), and released jobs nobody claimed released again. Woken by a
submission or a heartbeat with free slots, at least every ``dispatch_interval``."""

from __future__ import annotations

import asyncio

from raiserver.jobs.lifecycle import release_again, release_jobs
from raiserver.parts import AppServices
from raiserver.services.loop_service import LoopService, one_process_at_a_time


def dispatch_pass(svc: AppServices) -> int:
    """One fair-share release pass, by one server process at a time (a Redis lock)."""
    s = svc.settings
    with one_process_at_a_time(svc, "dispatch", 30) as mine:
        if not mine:
            return 0
        with svc.queue_lane.db.session() as db:
            release_again(db, svc)
            return release_jobs(
                db,
                lambda job: svc.dispatcher.send(job.id, job.attempt, job.queue, job.reserved),
                s.worker_dead_after,
                s.staff_priority,
                set(s.priority_kinds),
            )


class Release(LoopService):
    name = "dispatch"
    queue_lane = True

    def __init__(self, svc: AppServices, wake: asyncio.Event) -> None:
        super().__init__(svc, svc.settings.dispatch_interval, wake)

    def run_once(self) -> int:
        return dispatch_pass(self.svc)
