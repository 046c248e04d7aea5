"""One job, start to end, on this worker: claim → fetch → unpack → run → build folder → report →
tidy (what nobody waits for: removing the container, starting the next one ahead of time).

Whatever happens inside, the job's end is reported to the server (retried through a server
restart) and the container and temporary folders are removed.
"""

from __future__ import annotations

import logging
import shutil
import tarfile
import threading
import time
from pathlib import Path

import redis

from raiprotocol.archive import ArchiveError, pack_directory
from raiprotocol.keys import cancel_key
from raiprotocol.models import GpuInfo, JobState, JobUpdate, Phase

from .config import WorkerSettings
from .errors import Refused, ServerUnreachable, WorkerError
from .executors import Executor, JobContext, Outcome, execute, make_executor
from .gpus import hold_gpus, host_share
from .logsink import LogSink
from .metrics import job_done
from .server import ServerClient
from .unpack import unpack

log = logging.getLogger("raiworker")


def _watch_cancel(r: redis.Redis, job_id: str, cancel: threading.Event, done: threading.Event) -> None:
    while not done.wait(0.25):
        try:
            if r.exists(cancel_key(job_id)):
                cancel.set()
                return
        except redis.RedisError:
            pass


def running_dir(settings: WorkerSettings) -> Path:
    return settings.work_dir / "running"


def run_job(settings: WorkerSettings, gpus: list[GpuInfo], job_id: str, attempt: int) -> str:
    """Run one delivery of a job. Returns the final state, or 'skipped' for a refused claim."""
    server = ServerClient(settings)
    r = redis.Redis.from_url(settings.redis_url)
    claimed_at = time.monotonic()
    try:
        try:
            grant = server.claim(job_id, attempt)
        except Refused as exc:
            log.info("not running %s (attempt %s): %s", job_id, attempt, exc)
            return "skipped"
        sink = LogSink(r, job_id, settings.output_bytes, settings.line_bytes, settings.output_lines)
        marker = running_dir(settings) / job_id
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
        workdir = settings.work_dir / "jobs" / f"{job_id}.{attempt}"
        outcome = Outcome(JobState.error, message="the worker stopped unexpectedly")
        build_uploaded = False
        phases: list[Phase] = []
        executor: Executor | None = None
        try:
            executor = make_executor(settings)
            outcome = _run(settings, gpus, server, r, sink, grant, workdir, phases, executor)
            if outcome.state is not JobState.queued:  # queued: lost where it ran, it runs again
                build_uploaded = _ship_build(server, job_id, attempt, workdir / "build", sink)
        except Refused as exc:
            log.warning("job %s refused mid-run: %s", job_id, exc)
            return "skipped"
        except Exception as exc:  # infrastructure trouble: the student's code did not fail
            if isinstance(exc, WorkerError):  # a known cause: its message says it all
                log.warning("job %s: %s", job_id, exc)
            else:
                log.exception("job %s: worker error", job_id)
            message = f"worker {settings.worker_name} error: {exc}"
            outcome = Outcome(JobState.error, message=message)
            try:
                sink.system(message)
            except redis.RedisError:
                pass
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
            marker.unlink(missing_ok=True)
        if not build_uploaded and outcome.state is JobState.succeeded:
            outcome = Outcome(JobState.error, message="the build folder could not be uploaded")
        if not sink.close():  # Redis stayed away: the job's end is still reported
            log.warning("job %s: some log lines could not be written to Redis", job_id)
        try:
            if sink.first_output is not None:
                phases.append(Phase(name="first line", at=sink.first_output))
            server.update(job_id, JobUpdate(attempt=attempt, state=outcome.state, exit_code=outcome.exit_code,
                                            failed_command=outcome.failed_command, message=outcome.message, phases=phases))
        except Refused as exc:
            log.warning("final state of %s refused: %s", job_id, exc)
        job_done(outcome.state.value, time.monotonic() - claimed_at)
        if executor is not None:
            try:
                executor.tidy()
            except Exception:  # noqa: BLE001 - the job is over; a restarted worker removes leftovers
                log.exception("job %s: tidying up after it failed", job_id)
        return outcome.state.value
    finally:
        server.close()
        r.close()


def _run(settings: WorkerSettings, gpus: list[GpuInfo], server: ServerClient, r: redis.Redis,
         sink: LogSink, grant, workdir: Path, phases: list[Phase], executor: Executor) -> Outcome:
    shutil.rmtree(workdir, ignore_errors=True)
    (workdir / "src").mkdir(parents=True)
    (workdir / "build").mkdir()
    archive = server.fetch_archive(grant.job_id, workdir / "project.tar.gz")
    try:
        unpack(archive, workdir / "src", settings.container_user)
    except ArchiveError as exc:
        return Outcome(JobState.error, message=f"the project archive could not be unpacked: {exc}")
    archive.unlink()
    (workdir / "build").chmod(0o777)
    cancel, done = threading.Event(), threading.Event()
    watcher = threading.Thread(target=_watch_cancel, args=(r, grant.job_id, cancel, done), daemon=True)
    watcher.start()
    try:
        if grant.exclusive:
            sink.system(f"Waiting for {settings.worker_name} to be free of other jobs (exclusive run)")
        with host_share(settings.work_dir / "locks", grant.exclusive), \
                hold_gpus(settings.work_dir / "locks", gpus, grant.gpu_count) as gpu_ids:
            ctx = JobContext(
                job_id=grant.job_id,
                image=grant.image,
                commands=grant.commands,
                src_dir=workdir / "src",
                build_dir=workdir / "build",
                wall_seconds=min(grant.wall_seconds or settings.wall_seconds, settings.wall_seconds),
                command_seconds=grant.command_seconds,
                memory_mb=min(grant.memory_mb or settings.memory_mb, settings.memory_mb),
                gpu_ids=gpu_ids,
                settings=settings,
                repeat_timing=grant.repeat_timing,
                gpu_count=grant.gpu_count,
                phases=phases,
                report_waiting=lambda words: _report_waiting(server, grant.job_id, grant.attempt, words),
            )
            try:
                started = time.monotonic()
                outcome = execute(executor, ctx, sink, cancel)
                executor.collect_build(ctx)
                if outcome.state is not JobState.succeeded and outcome.message and outcome.state is not JobState.failed:
                    sink.system(outcome.message)
                log.info("job %s: %s in %.1f s", grant.job_id, outcome.state.value, time.monotonic() - started)
                return outcome
            finally:
                executor.cleanup()
    finally:
        done.set()


def _report_waiting(server: ServerClient, job_id: str, attempt: int, words: str | None) -> None:
    """A progress note, not a state change: if the server is away the job goes on regardless."""
    try:
        server.update(job_id, JobUpdate(attempt=attempt, state=JobState.running, waiting=words), retry_for=10.0)
    except ServerUnreachable as exc:
        log.warning("job %s: waiting reason not reported: %s", job_id, exc)


def _ship_build(server: ServerClient, job_id: str, attempt: int, build: Path, sink: LogSink) -> bool:
    if not build.is_dir():
        return False
    tarball = build.parent / "build.tar.gz"
    try:
        pack_directory(build, tarball)
    except (OSError, tarfile.TarError) as exc:
        sink.system(f"could not pack the build folder: {exc}")
        return False
    server.upload_build(job_id, attempt, tarball)
    return True
