"""The loops every server process runs beside its requests: the reaper (leases, fences, lost
deliveries, abandoned temporary files), the fair-share release, and staff's similarity reports. Each pass is taken by one process
at a time, through a Redis lock, whatever the number of processes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import datetime, timezone

from fastapi.concurrency import run_in_threadpool
from sqlalchemy.orm import Session

from raiserver.grading.similarityreport import make, next_report
from raiserver.jobs.lifecycle import reap, release_again, release_jobs, restore_fences
from raiserver.services import AppServices
from raiserver.store.redis_keys import REAPER_AWAKE, REAPER_LAST, process_lock
from raiserver.store.tables import Job

log = logging.getLogger("raiserver")


@contextmanager
def one_process_at_a_time(svc: AppServices, name: str, timeout: int) -> Iterator[bool]:
    """A Redis lock across every server process: yields whether this one holds it."""
    lock = svc.redis.sync.lock(process_lock(name), timeout=timeout, blocking=False)
    if not lock.acquire():
        yield False
        return
    try:
        yield True
    finally:
        with contextlib.suppress(Exception):  # expired under a very slow pass: harmless
            lock.release()


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
        with svc.db.session() as db:
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


async def reaper(svc: AppServices) -> None:
    """Every ``reaper_interval``: a reaper pass, and once a minute the sweeps."""
    swept = 0.0  # the first pass sweeps at start
    while True:
        await asyncio.sleep(svc.settings.reaper_interval)
        forget = time.monotonic() - swept > 60
        if forget:  # temporary files a killed server process left
            swept = time.monotonic()
            try:
                n = await run_in_threadpool(svc.storage.sweep_tmp)
                if n:
                    log.warning("removed %d abandoned temporary file(s) from storage", n)
            except OSError:
                log.exception("sweeping temporary files failed")
        try:
            n = await run_in_threadpool(reaper_pass, svc, forget)
            if n:
                log.warning("requeued %d job(s) whose run's lease lapsed", n)
        except Exception:  # keep reaping whatever one pass hit
            log.exception("reaper pass failed")


def dispatch_pass(svc: AppServices) -> int:
    """One fair-share release pass, by one server process at a time (a Redis lock)."""
    s = svc.settings
    with one_process_at_a_time(svc, "dispatch", 30) as mine:
        if not mine:
            return 0
        with svc.db.session() as db:
            release_again(db, svc)
            return release_jobs(
                db,
                lambda job: svc.dispatcher.send(job.id, job.attempt, job.queue, job.reserved),
                s.worker_dead_after,
                s.staff_priority,
                set(s.priority_kinds),
            )


async def dispatcher(svc: AppServices, wake: asyncio.Event) -> None:
    """A release pass when woken (a submission, a heartbeat with free slots), at least every ``dispatch_interval``."""
    interval = svc.settings.dispatch_interval
    while True:
        with suppress(asyncio.TimeoutError):
            await asyncio.wait_for(wake.wait(), timeout=interval)
        wake.clear()
        try:
            await run_in_threadpool(dispatch_pass, svc)
        except Exception:  # the database or Redis may be restarting: try again next round
            log.exception("dispatch pass failed")


SIMILARITY_LOCK_SECONDS = 60  # renewed with every progress note (at least every few seconds)


def similarity_pass(svc: AppServices) -> int | None:
    """Make the next similarity report, if any, in this thread; one process at a time (a Redis lock
    renewed as it goes: a process that stops lets another take the report up again). Returns its id."""
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


async def similarity(svc: AppServices) -> None:
    """Every 2 s: a report staff asked for is made in a thread, never on a request's path."""
    while True:
        await asyncio.sleep(2.0)
        try:
            await run_in_threadpool(similarity_pass, svc)
        except Exception:  # Redis or the database away: try again next round
            log.exception("similarity pass failed")
