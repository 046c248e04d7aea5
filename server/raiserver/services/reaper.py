"""The reaper: what keeps each job running once. Every ``reaper_interval`` one server process puts
back the fences Redis lost and requeues the runs whose lease lapsed; once a minute it also drops
the Celery deliveries dead workers held and the temporary files a killed process left."""

from __future__ import annotations

import logging
import time
from datetime import datetime, timezone

from sqlalchemy.orm import Session

from raiserver.jobs.lifecycle import reap, restore_fences
from raiserver.parts import AppServices
from raiserver.services.loop_service import LoopService, one_process_at_a_time
from raiserver.store.redis_keys import REAPER_AWAKE, REAPER_LAST
from raiserver.store.tables import Job

log = logging.getLogger("raiserver")
SWEEP_SECONDS = 60.0


def awake_since(svc: AppServices, now: float) -> datetime:
    """When the reaper last resumed after not running for a while (this server process stopped,
    every process busy or away, Redis away or wiped): leases are judged only a full window after
    it, so the server's own stall is never taken for the workers' silence. Kept in Redis: any
    server process may hold the reaper's lock next."""
    r = svc.redis.sync
    last = r.getset(REAPER_LAST, now)
    stalled = max(3 * svc.settings.reaper_interval, 10.0)
    if last is None or now - float(last) > stalled:
        r.set(REAPER_AWAKE, now)
        if last is not None:
            log.warning("the reaper did not run for %.0f s: every running job's lease gets a fresh window", now - float(last))
    awake = r.get(REAPER_AWAKE)
    return datetime.fromtimestamp(float(awake) if awake else now, timezone.utc)


def reaper_pass(svc: AppServices, forget: bool = False) -> int:
    """One pass, by one server process at a time: fences Redis lost put back, runs whose lease
    lapsed requeued, and (``forget``) deliveries of dead workers dropped from Celery's keys."""
    with one_process_at_a_time(svc, "reaper", 60) as mine:
        if not mine:
            return 0
        since = awake_since(svc, time.time())
        with svc.queue_lane.db.session() as db:
            restore_fences(db, svc)
            n = reap(db, svc, since)
            if forget:
                gone = svc.dispatcher.forget_stale(svc.redis.sync, lambda job_id, attempt: _stale(db, job_id, attempt))
                if gone:
                    log.info("dropped %d delivery(ies) held by workers that died", gone)
            return n


def _stale(db: Session, job_id: str, attempt: int) -> bool:
    job = db.get(Job, job_id)
    return job is None or job.state.finished or attempt < job.attempt


class Reaper(LoopService):
    name = "reaper"
    queue_lane = True

    def __init__(self, svc: AppServices) -> None:
        super().__init__(svc, svc.settings.reaper_interval)
        self.swept = 0.0  # the first pass sweeps at start

    def run_once(self) -> int:
        forget = time.monotonic() - self.swept > SWEEP_SECONDS
        if forget:  # temporary files a killed server process left
            self.swept = time.monotonic()
            try:
                n = self.svc.storage.sweep_tmp()
                if n:
                    log.warning("removed %d abandoned temporary file(s) from storage", n)
            except OSError:
                log.exception("sweeping temporary files failed")
        n = reaper_pass(self.svc, forget)
        if n:
            log.warning("requeued %d job(s) whose run's lease lapsed", n)
        return n
