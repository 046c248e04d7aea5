"""Staff's similarity reports, made in the background (never on a request's path): every 2 s the
next report asked for, by one process at a time, its lock renewed with every progress note (a
process that stops lets another take the report up again)."""

from __future__ import annotations

import logging

from raiserver.grading.similarityreport import make, next_report
from raiserver.parts import AppServices
from raiserver.services.loop_service import LoopService, one_process_at_a_time
from raiserver.store.redis_keys import process_lock

log = logging.getLogger("raiserver")
SIMILARITY_LOCK_SECONDS = 60  # renewed with every progress note (at least every few seconds)


def similarity_pass(svc: AppServices) -> int | None:
    """Make the next similarity report, if any, in this thread. Returns its id."""
    with one_process_at_a_time(svc, "similarity", SIMILARITY_LOCK_SECONDS) as mine:
        if not mine:
            return None
        with svc.db.session() as db:
            report = next_report(db)
        if report is None:
            return None

        def beat() -> None:
            svc.redis.sync.expire(process_lock("similarity"), SIMILARITY_LOCK_SECONDS)

        log.info("making similarity report %d", report)
        make(svc.db, svc.storage, report, beat)
        return report


class Similarity(LoopService):
    name = "similarity"

    def __init__(self, svc: AppServices) -> None:
        super().__init__(svc, 2.0)

    def run_once(self) -> int | None:
        return similarity_pass(self.svc)
