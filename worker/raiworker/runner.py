"""One job, start to end, on this worker: claim → fetch → unpack → run → build folder → report →
tidy (what nobody waits for: removing the container, starting the next one ahead of time).

The run holds a lease on its job for as long as it lasts (``lease``), and every line it writes
carries its attempt: a run superseded by another attempt, or cut off from the server for longer
than its lease, stops at once and reports nothing more. Whatever happens inside, the job's end is
reported to the server (retried through a server restart), and on every path, refused and
superseded runs too, the container and temporary folders are removed.
"""

from __future__ import annotations

import logging
import shutil
import tarfile
import threading
import time
from pathlib import Path

import redis

from raiprotocol.archive import ArchiveError, OverLimit, TooSlow, pack_directory
from raiprotocol.keys import cancel_key
from raiprotocol.models import ClaimGranted, GpuInfo, JobState, JobUpdate, MeasuredRun, Phase

from .config import WorkerSettings
from .errors import BuildTooLarge, Refused, ServerTrouble, ServerUnreachable, UploadTooSlow, WorkerError
from .executors import Executor, JobContext, Outcome, execute, make_executor
from .gpus import ShareWatch, hold_gpus, host_share
from .lease import LOST, SUPERSEDED, Lease
from .logsink import LogSink
from .metrics import job_done
from .server import ServerClient
from .unpack import unpack
from .workdir import job_dir, jobs_dir, locks_dir
from .workdir import running_dir as running_dir_of

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
                    server.update(marker.name, JobUpdate(attempt=attempt, state=JobState.queued,
                                                         message=f"Worker {settings.worker_name} restarted: the run it held was lost"),
                                  retry_for=5.0)
                except (Refused, ServerUnreachable) as exc:  # over already, or the server is away
                    log.info("lost job %s not reported at start: %s", marker.name, exc)
    finally:
        server.close()
    shutil.rmtree(jobs_dir(settings.work_dir), ignore_errors=True)  # the earlier run's job folders
    return lost


def run_job(settings: WorkerSettings, gpus: list[GpuInfo], job_id: str, attempt: int) -> str:
    """Run one delivery of a job. Returns the final state, 'skipped' for a refused claim, or
    'superseded' for a run that another attempt replaced (or whose lease it lost) before its end."""
    server = ServerClient(settings)
    # every Redis call of the run is bounded: a Redis cut off mid-call must not hold the run
    r = redis.Redis.from_url(settings.redis_url, socket_timeout=10, socket_connect_timeout=5)
    claimed_at = time.monotonic()
    try:
        try:
            grant = server.claim(job_id, attempt)
        except Refused as exc:
            log.info("not running %s (attempt %s): %s", job_id, attempt, exc)
            return "skipped"
        attempt = grant.attempt  # a run taking over a lost one has an attempt of its own
        # listed in every heartbeat while it exists: until the job's end is reported (the server
        # requeues a job its worker does not list); it holds the attempt, for a restarted worker;
        # its time is the lease's last renewal, which the worker's main process watches
        marker = running_dir(settings) / job_id
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(str(attempt))
        stop = threading.Event()  # cancelled, superseded or the lease lost: the run ends now
        lease = Lease(settings, job_id, attempt, stop, marker)
        spool = jobs_dir(settings.work_dir) / f"{job_id}.{attempt}.log.jsonl"
        spool.parent.mkdir(parents=True, exist_ok=True)
        sink = LogSink(r, job_id, settings.output_bytes, settings.line_bytes, settings.output_lines,
                       attempt=attempt, spool=spool, on_superseded=lease.supersede)
        lease.start()
        try:
            return _deliver(settings, gpus, server, r, sink, grant, lease, claimed_at)
        finally:
            lease.close()
            sink.close(wait=0)
            spool.unlink(missing_ok=True)
            marker.unlink(missing_ok=True)
    finally:
        server.close()
        r.close()


def _deliver(settings: WorkerSettings, gpus: list[GpuInfo], server: ServerClient, r: redis.Redis, sink: LogSink,
             grant: ClaimGranted, lease: Lease, claimed_at: float) -> str:
    """The claimed job: run it, ship its build folder, report its end; tidy up on every path."""
    job_id, attempt = grant.job_id, grant.attempt
    workdir = job_dir(settings.work_dir, job_id, attempt)
    outcome = Outcome(JobState.error, message="the worker stopped unexpectedly")
    build_uploaded = False
    phases: list[Phase] = []
    measured: list[MeasuredRun] = []
    executor: Executor | None = None
    try:
        try:
            executor = make_executor(settings)
            outcome = _run(settings, gpus, server, r, sink, grant, workdir, phases, executor, measured, lease.stop_run)
            if lease.reason is None and outcome.state is not JobState.queued:  # queued: lost where it ran, it runs again
                # the commands are over (and a container's /build copied, within the wall clock):
                # packing and sending it get the collection allowance, no more
                deadline = time.monotonic() + settings.collect_seconds
                build_uploaded, refused = _ship_build(settings, server, grant, workdir / "build", sink, deadline)
                if refused and outcome.state is JobState.succeeded:
                    outcome = Outcome(JobState.failed, message=refused)
        except Refused as exc:
            log.warning("job %s refused mid-run: %s", job_id, exc)
            lease.supersede()
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
        if lease.reason == SUPERSEDED or sink.superseded:
            log.warning("job %s: attempt %d was superseded; its run is stopped and nothing more of it is reported", job_id, attempt)
            return "superseded"
        if lease.reason == LOST:
            outcome = Outcome(JobState.queued, message=f"worker {settings.worker_name} could not reach the server for "
                                                       f"{settings.worker_dead_after:g} s and stopped the run; the job runs again")
            sink.system(outcome.message or "")
        if not build_uploaded and outcome.state is JobState.succeeded:
            outcome = Outcome(JobState.error, message="the build folder could not be uploaded")
        _report(settings, server, sink, grant, outcome, phases, measured, lease)
        job_done(outcome.state.value, time.monotonic() - claimed_at)
        return outcome.state.value
    finally:  # every path, refused and superseded runs too: nothing of the job is left behind
        if executor is not None:
            try:
                executor.tidy()
            except Exception:  # noqa: BLE001 - the job is over; a restarted worker removes leftovers
                log.exception("job %s: tidying up after it failed", job_id)


def _report(settings: WorkerSettings, server: ServerClient, sink: LogSink, grant: ClaimGranted, outcome: Outcome,
            phases: list[Phase], measured: list[MeasuredRun], lease: Lease) -> None:
    """The job's end, to the server (retried through its restart), after the log: when Redis lost
    some of the run's lines, the worker's copy goes first, so the stored log is whole."""
    job_id, attempt = grant.job_id, grant.attempt
    if not sink.close():  # Redis stayed away: the job's end is still reported
        log.warning("job %s: some log lines could not be written to Redis", job_id)
    if sink.superseded:
        return
    if sink.trouble or not sink.whole_in_redis():
        try:
            server.upload_log(job_id, attempt, sink.spool_path)
        except (Refused, ServerUnreachable, ServerTrouble, OSError) as exc:
            log.warning("job %s: the worker's copy of the log was not sent: %s", job_id, exc)
    lease.reporting = True  # the lease is held until the server took the end (it may be away a while)
    try:
        if sink.first_output is not None:
            phases.append(Phase(name="first line", at=sink.first_output))
        server.update(job_id, JobUpdate(attempt=attempt, state=outcome.state, exit_code=outcome.exit_code,
                                        failed_command=outcome.failed_command, message=outcome.message, phases=phases,
                                        measured=measured if grant.timed else None,
                                        gpu_shared_with=outcome.gpu_shared_with))
    except Refused as exc:
        log.warning("final state of %s refused: %s", job_id, exc)


def _run(settings: WorkerSettings, gpus: list[GpuInfo], server: ServerClient, r: redis.Redis,
         sink: LogSink, grant: ClaimGranted, workdir: Path, phases: list[Phase], executor: Executor,
         measured: list[MeasuredRun], cancel: threading.Event) -> Outcome:
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
    done = threading.Event()
    watcher = threading.Thread(target=_watch_cancel, args=(r, grant.job_id, cancel, done), daemon=True)
    watcher.start()
    try:
        if grant.exclusive:
            sink.system(f"Waiting for {settings.worker_name} to be free of other jobs (exclusive run)")
        per_gpu = settings.per_gpu
        share = 1 if grant.exclusive else settings.share_for(grant.queue)  # ranked runs: the GPU alone
        with host_share(locks_dir(settings.work_dir), grant.exclusive), \
                hold_gpus(locks_dir(settings.work_dir), gpus, grant.gpu_count, per_gpu=per_gpu, share=share) as gpu_ids, \
                ShareWatch(locks_dir(settings.work_dir), gpus, gpu_ids, per_gpu, max(per_gpu // share, 1)) as shared:
            if gpu_ids and share > 1:
                sink.system(f"GPU {', '.join(gpu_ids)} is shared: up to {share} jobs run on it at once "
                            f"({shared.most} other(s) now); times this run prints are not those of a GPU alone")
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
                timed=grant.timed,
                gpu_count=grant.gpu_count,
                phases=phases,
                report_waiting=lambda words: _report_waiting(server, grant.job_id, grant.attempt, words),
            )
            try:
                started = time.monotonic()
                outcome = execute(executor, ctx, sink, cancel)
                measured.extend(ctx.measured)
                cut = executor.collect_build(ctx, cancel)
                if cut is not None:
                    if outcome.state is JobState.succeeded:
                        outcome = cut
                    else:  # the job's own end stands; the log still says what became of /build
                        sink.system(cut.message or "the build folder is incomplete")
                if outcome.state is not JobState.succeeded and outcome.message and outcome.state is not JobState.failed:
                    sink.system(outcome.message)
                log.info("job %s: %s in %.1f s", grant.job_id, outcome.state.value, time.monotonic() - started)
                if gpu_ids:
                    outcome.gpu_shared_with = max(shared.most, shared.others())
                    if share > 1:
                        sink.system(f"This run shared its GPU with up to {outcome.gpu_shared_with} other job(s)"
                                    if outcome.gpu_shared_with else "This run had its GPU alone after all")
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


def _ship_build(settings: WorkerSettings, server: ServerClient, grant: ClaimGranted, build: Path, sink: LogSink,
                deadline: float) -> tuple[bool, str | None]:
    """Pack and upload the build folder: (uploaded, why it was refused: the student's, over a limit).

    Whatever the job left there, this ends by ``deadline`` (a slow upload: a little later, see
    MIN_UPLOAD_SECONDS) and never sends more than the server stores: a 1.5 GB folder was packed
    and sent for 32 s past the wall clock, then ended ``error`` with the server's 413."""
    if not build.is_dir():
        return False, None
    job_id, attempt = grant.job_id, grant.attempt
    worker_limit = settings.build_mb * 1024**2
    limit = min(worker_limit, grant.max_build_bytes or worker_limit)
    size_limit = "the server's RAI_MAX_BUILD_BYTES" if limit < worker_limit else "RAI_BUILD_MB"
    tarball = build.parent / "build.tar.gz"

    def refuse(what: str) -> tuple[bool, str]:
        why = f"the build folder was not kept: {what}"
        sink.system(why)
        return False, why

    try:
        pack_directory(build, tarball, max_bytes=limit, max_entries=settings.build_files, deadline=deadline)
    except TooSlow as exc:
        return refuse(f"it holds {exc} (RAI_COLLECT_SECONDS)")
    except OverLimit as exc:
        return refuse(f"it holds {exc} ({'RAI_BUILD_FILES' if 'files and folders' in str(exc) else size_limit})")
    except (OSError, tarfile.TarError) as exc:
        sink.system(f"could not pack the build folder: {exc}")
        return False, None
    packed = tarball.stat().st_size
    if grant.max_build_bytes is not None and packed > grant.max_build_bytes:  # tar's headers on top of the files
        return refuse(f"packed, it is {packed // 1024**2} MiB, more than the server stores "
                      f"({grant.max_build_bytes // 1024**2} MiB, RAI_MAX_BUILD_BYTES)")
    try:
        server.upload_build(job_id, attempt, tarball, seconds=max(deadline - time.monotonic(), MIN_UPLOAD_SECONDS),
                            on_wait=lambda why: sink.system(f"The server cannot store the build folder yet: {why}; "
                                                            f"the worker keeps it and retries for up to {settings.trouble_seconds / 60:.0f} minutes"))
    except BuildTooLarge as exc:  # a server whose limit the claim did not carry, or a smaller one since
        return refuse(f"the server refused it: {exc}")
    except UploadTooSlow as exc:
        log.warning("job %s: the build folder (%d MiB packed) was not uploaded in time", job_id, packed // 1024**2)
        return refuse(f"{packed // 1024**2} MiB packed; {exc} (RAI_COLLECT_SECONDS)")
    return True, None


# however late packing ended, sending a build folder within the limits may take this long
MIN_UPLOAD_SECONDS = 30.0
