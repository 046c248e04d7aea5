"""The worker's entry points for jobs, as the Celery task and the worker's start call them: run one
delivery of a job (``run_job``: its claim, then its ``JobRun``), and at start, report what an
earlier run of this worker left (``recover``).
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import redis

from raiprotocol.models import GpuInfo, JobState, JobUpdate

from ..config import WorkerSettings
from ..errors import NoPlace, Refused, ServerUnreachable
from ..lease import IdleStamp
from ..server import ServerClient
from ..workdir import jobs_dir, lease_stamp, locks_dir
from ..workdir import running_dir as running_dir_of
from .job import JobRun
from .places import place

log = logging.getLogger("raiworker")


def running_dir(settings: WorkerSettings) -> Path:
    return running_dir_of(settings.work_dir)


def recover(settings: WorkerSettings) -> list[str]:
    """At start: what an earlier run of this worker left. The jobs it was running (their markers)
    are reported lost, so the server requeues them at once (should the server be away, the first
    heartbeats, which do not list them, do it); their folders are removed. Returns the job ids."""
    lost = []
    folder = running_dir(settings)
    folder.mkdir(parents=True, exist_ok=True)
    server = ServerClient(settings)
    try:
        for marker in folder.glob("*"):
            try:
                attempt = int(marker.read_text().strip() or 0)
            except (OSError, ValueError):
                attempt = 0
            marker.unlink(missing_ok=True)
            lost.append(marker.name)
            if attempt:
                try:
                    server.update(
                        marker.name,
                        JobUpdate(
                            attempt=attempt,
                            state=JobState.queued,
                            message=f"Worker {settings.worker_name} restarted: the run it held was lost",
                        ),
                        retry_for=5.0,
                    )
                except (Refused, ServerUnreachable) as exc:  # over already, or the server is away
                    log.info("lost job %s not reported at start: %s", marker.name, exc)
    finally:
        server.close()
    shutil.rmtree(jobs_dir(settings.work_dir), ignore_errors=True)  # the earlier run's job folders
    return lost


def run_job(settings: WorkerSettings, gpus: list[GpuInfo], job_id: str, attempt: int, slots: int = 1, exclusive: bool = False) -> str:
    """Run one delivery of a job in a place of its kind on this host (``places``). Returns the final
    state, 'skipped' for a refused claim, or 'superseded' for a run that another attempt replaced
    (or whose lease it lost) before its end. Raises ``NoPlace``, having claimed nothing, when no
    place is free."""
    with place(locks_dir(settings.work_dir), slots, exclusive) as held:
        if held is None:
            raise NoPlace("exclusive" if exclusive else "shared")
        server = ServerClient(settings)
        # every Redis call of the run is bounded: a Redis cut off mid-call must not hold the run
        r = redis.Redis.from_url(settings.redis_url, socket_timeout=10, socket_connect_timeout=5)
        idle = _idle_stamp(settings)
        idle.pause()
        try:
            run = JobRun.claim(settings, gpus, server, r, job_id, attempt, ranked=exclusive)
            return run.run() if run is not None else "skipped"
        finally:
            idle.resume()
            server.close()
            r.close()


_idle: list[IdleStamp] = []  # this pool process's, made at its first job


def _idle_stamp(settings: WorkerSettings) -> IdleStamp:
    if not _idle:
        _idle.append(IdleStamp(lease_stamp(settings.work_dir), settings.worker_dead_after, settings.heartbeat_seconds))
    return _idle[0]
