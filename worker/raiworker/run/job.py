"""One claimed delivery of a job on this worker, as an object (buildkite-agent's JobRunner is the
model): what the run holds (its grant, the settings, the server, Redis, its log, its lease, its
executor) and what it gathered (its phases, its measured runs, its outcome), with a method for each
step: claim → run (fetch, unpack, execute, collect /build) → ship the build folder → report → tidy.

The run holds a lease on its job for as long as it lasts (``lease``), and every line it writes
carries its attempt: a run superseded by another attempt, or cut off from the server for longer
than its lease, stops at once and reports nothing more. Whatever happens inside, the job's end is
reported to the server (retried through a server restart), and on every path, refused and
superseded runs too, the container and temporary folders are removed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tarfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import redis

from raiprotocol.archive import ArchiveError, OverLimit, TooSlow, pack_directory
from raiprotocol.keys import cancel_key
from raiprotocol.models import ClaimGranted, GpuInfo, JobState, JobUpdate, MeasuredRun, Phase

from ..config import WorkerSettings
from ..errors import BuildTooLarge, Refused, ServerTrouble, ServerUnreachable, UploadTooSlow, WorkerError
from ..executors import Executor, JobContext, Outcome, execute, make_executor
from ..gpu.holds import GpuHold, HostHold, ShareWatch, Stopped, hold_gpus, host_share, profiler_lock
from ..lease import HANDED_BACK, LOST, SUPERSEDED, Lease, boot_clock, handed_back_words, stopped_words
from ..logsink import LogSink
from ..metrics import job_done
from ..server import ServerClient
from ..workdir import job_dir, jobs_dir, lease_stamp, locks_dir, running_dir
from .unpack import unpack

log = logging.getLogger("raiworker")

# however late packing ended, sending a build folder within the limits may take this long
MIN_UPLOAD_SECONDS = 30.0


class JobRun:
    """One delivery of a job, from its claim (``claim``) to its tidying (``run`` does the rest)."""

    def __init__(
        self,
        settings: WorkerSettings,
        gpus: list[GpuInfo],
        server: ServerClient,
        r: redis.Redis,
        grant: ClaimGranted,
        claimed_at: tuple[float, float, float],
        ranked: bool = False,
    ) -> None:
        self.settings, self.gpus, self.server, self.redis, self.grant = settings, gpus, server, r, grant
        self.job_id, self.attempt = grant.job_id, grant.attempt  # a run taking over a lost one has an attempt of its own
        self.claimed_at = claimed_at[0]
        self.workdir = job_dir(settings.work_dir, self.job_id, self.attempt)
        # listed in every heartbeat while it exists: until the job's end is reported (the server
        # requeues a job its worker does not list); it holds the attempt, for a restarted worker
        self.marker = running_dir(settings.work_dir) / self.job_id
        self.marker.parent.mkdir(parents=True, exist_ok=True)
        self.marker.write_text(str(self.attempt))
        # its stop event: cancelled, superseded or the lease lost, the run ends now
        self.lease = Lease(settings, self.job_id, self.attempt, threading.Event(), lease_stamp(settings.work_dir), claimed_at)
        self.spool = jobs_dir(settings.work_dir) / f"{self.job_id}.{self.attempt}.log.jsonl"
        self.spool.parent.mkdir(parents=True, exist_ok=True)
        self.sink = LogSink(
            r,
            self.job_id,
            settings.output_bytes,
            settings.line_bytes,
            settings.output_lines,
            attempt=self.attempt,
            spool=self.spool,
            on_superseded=self.lease.supersede,
        )
        self.executor: Executor | None = None
        self.phases: list[Phase] = []  # when each step happened, for the job's timeline
        self.measured: list[MeasuredRun] = []  # a ranked job's timed runs
        self.outcome = Outcome(JobState.error, message="the worker stopped unexpectedly")
        self.build_uploaded = False
        self.ranked = ranked  # delivered on the ranked runs' lane: the host goes to it before a student's exclusive run
        self.let_in_for = 0.0  # a ranked run: how long it let the jobs waiting for its host go first
        self.tail: int | None = None  # the host's tail lock (gpu.holds.HostHold.keep_tail), until tidied

    @classmethod
    def claim(
        cls,
        settings: WorkerSettings,
        gpus: list[GpuInfo],
        server: ServerClient,
        r: redis.Redis,
        job_id: str,
        attempt: int,
        ranked: bool = False,
    ) -> JobRun | None:
        """Claim the delivery from the server: its run, or None when the server refused it (the job
        ended, another attempt holds it). ``ranked``: delivered on the ranked runs' lane."""
        claimed_at = time.monotonic(), boot_clock(), time.time()  # before the request: the lease starts no earlier
        try:
            grant = server.claim(job_id, attempt)
        except Refused as exc:
            log.info("not running %s (attempt %s): %s", job_id, attempt, exc)
            return None
        return cls(settings, gpus, server, r, grant, claimed_at, ranked)

    def run(self) -> str:
        """The claimed job, under its lease, to its end. Returns the final state, or 'superseded'
        for a run that another attempt replaced (or whose lease it lost) before its end."""
        self.lease.start()
        try:
            return self.deliver()
        finally:
            self.lease.close()
            self.sink.close(wait=0)
            self.spool.unlink(missing_ok=True)
            self._drop_marker()

    def _drop_marker(self) -> None:
        """The job's marker goes, unless a later attempt of the job on this worker made it its own
        (a run paused past its lease, then superseded, unlisted the rerun beside it: the server took
        that for lost, again and again, until it gave up after 3 attempts)."""
        try:
            if self.marker.read_text().strip() == str(self.attempt):
                self.marker.unlink(missing_ok=True)
        except OSError:
            pass

    def deliver(self) -> str:
        """Run the job, ship its build folder, report its end; tidy up on every path."""
        try:
            self._run_and_ship()
            return self._conclude()
        finally:  # every path, refused and superseded runs too: nothing of the job is left behind
            self.tidy()
            if self.tail is not None:
                os.close(self.tail)
                self.tail = None

    def _run_and_ship(self) -> None:
        try:
            try:
                self.executor = make_executor(self.settings)
                self.outcome = self.run_phases(self.executor)
                if self.lease.reason is None and self.outcome.state is not JobState.queued:  # queued: lost where it ran, it runs again
                    # the commands are over (and a container's /build copied, within the wall clock):
                    # packing and sending it get the collection allowance, no more
                    self.build_uploaded, refused = self.ship_build(time.monotonic() + self.settings.collect_seconds)
                    if refused and self.outcome.state is JobState.succeeded:
                        self.outcome = Outcome(JobState.failed, message=refused)
            except Refused as exc:
                log.warning("job %s refused mid-run: %s", self.job_id, exc)
                self.lease.supersede()
            except Exception as exc:  # noqa: BLE001 - infrastructure trouble: the student's code did not fail
                self._trouble(exc)
        finally:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _trouble(self, exc: Exception) -> None:
        """The worker failed the job (not the student's code): its end is an error that says why."""
        if isinstance(exc, WorkerError):  # a known cause: its message says it all
            log.warning("job %s: %s", self.job_id, exc)
        else:
            log.exception("job %s: worker error", self.job_id)
        message = f"worker {self.settings.worker_name} error: {exc}"
        self.outcome = Outcome(JobState.error, message=message)
        with contextlib.suppress(redis.RedisError):
            self.sink.system(message)

    def _conclude(self) -> str:
        """The run's end as the server hears it: nothing for a superseded run, a requeue for one
        that lost its lease, else its outcome."""
        if self.lease.reason == SUPERSEDED or self.sink.superseded:
            log.warning(
                "job %s: attempt %d was superseded; its run is stopped and nothing more of it is reported", self.job_id, self.attempt
            )
            return "superseded"
        if self.lease.reason == HANDED_BACK:  # said once, by the server's line that puts the job back in the queue
            self.outcome = Outcome(JobState.queued, message=handed_back_words(self.settings))
        if self.lease.reason == LOST:
            self.outcome = Outcome(
                JobState.queued,
                message=f"Worker {self.settings.worker_name} could not reach the server for "
                f"{self.settings.worker_dead_after:g} s and stopped the run",
            )
        if not self.build_uploaded and self.outcome.state is JobState.succeeded:
            self.outcome = Outcome(JobState.error, message="the build folder could not be uploaded")
        self.report()
        job_done(self.outcome.state.value, time.monotonic() - self.claimed_at)
        return self.outcome.state.value

    def tidy(self) -> None:
        """After the end is reported: the executor's work nobody waits for."""
        if self.executor is not None:
            try:
                self.executor.tidy()
            except Exception:  # noqa: BLE001 - the job is over; a restarted worker removes leftovers
                log.exception("job %s: tidying up after it failed", self.job_id)

    def run_phases(self, executor: Executor) -> Outcome:
        """Fetch and unpack the project, then, holding the host and the GPUs the job needs, run it."""
        problem = self.fetch()
        if problem is not None:
            return problem
        cancel = self.lease.stop_run
        done = threading.Event()
        watcher = threading.Thread(target=_watch_cancel, args=(self.redis, self.job_id, cancel, done), daemon=True)
        watcher.start()
        try:
            locks = locks_dir(self.settings.work_dir)
            per_gpu = self.settings.per_gpu
            share = 1 if self.grant.exclusive else self.settings.share_for(self.grant.queue)  # ranked runs: the GPU alone
            with (
                host_share(locks, self.grant.exclusive, self.wait_for_host, ranked=self.ranked, stopped=cancel.is_set) as host,
                hold_gpus(locks, self.gpus, self.grant.gpu_count, per_gpu=per_gpu, share=share, stopped=cancel.is_set) as gpu_ids,
                ShareWatch(locks, self.gpus, gpu_ids, per_gpu, max(per_gpu // share, 1)) as shared,
            ):
                if self.grant.exclusive:
                    self.sink.system(f"An exclusive run: {self.settings.worker_name} runs nothing else until it ends")
                if gpu_ids and share > 1:
                    self.sink.system(
                        f"GPU {', '.join(gpu_ids)} is shared: up to {share} jobs run on it at once "
                        f"({shared.most} other(s) now); times this run prints are not those of a GPU alone"
                    )
                if not self.ranked:  # held until its build folder is sent and its container gone (tidy)
                    self.tail = host.keep_tail()
                ctx = self.context(gpu_ids)
                if self.ranked:
                    ctx.between_runs = lambda r, stopped: self.let_others_in(host, gpu_ids, r, stopped)
                if gpu_ids and share > 1:
                    ctx.profiler_lock = profiler_lock(locks, gpu_ids[0])
                    ctx.profiler_turn_seconds = self.settings.profiler_turn_seconds
                    total = next((g.memory_mb for g in self.gpus if str(g.index) == gpu_ids[0]), None)
                    ctx.gpu_memory_share_mb = total // share if total else None
                    ctx.gpu_jobs_per_gpu = share
                outcome = self.run_commands(executor, ctx, cancel)
                if gpu_ids:
                    outcome.gpu_shared_with = max(shared.most, shared.others())
                    if share > 1:
                        self.sink.system(
                            f"This run shared its GPU with up to {outcome.gpu_shared_with} other job(s)"
                            if outcome.gpu_shared_with
                            else "This run had its GPU alone after all"
                        )
                return outcome
        except Stopped:  # cancelled (or its lease gone: said by _conclude) while it waited for the host or its GPUs
            self.report_waiting(None)
            return Outcome(JobState.cancelled, message="cancelled while it waited for the host")
        finally:
            done.set()

    def let_others_in(self, host: HostHold, gpus: GpuHold, r: int, stopped: Callable[[], bool]) -> None:
        """Before timed run ``r`` of a ranked run: the jobs waiting for the host then run first (issue 46)."""
        name = self.settings.worker_name

        def tell() -> None:
            timed = self.grant.timed
            before = "its reference runs and timed run 1" if r == 1 else f"timed run {r}"
            if timed is not None and r > timed.repeats:
                before = "its profiled run"
            self.sink.system(
                f"Before {before}: the jobs waiting for {name} run first (each within its wall limit); then this run has it alone again"
            )

        if self.let_in_for >= self.settings.ranked_let_in_seconds:
            return  # it waited its share for others: the rest of its runs go on at once
        started = time.monotonic()
        if host.let_waiting_in(gpus, tell, stopped) and not stopped():
            self.sink.system(f"{name} is this run's alone again")
            self.sink.flush()
        self.let_in_for += time.monotonic() - started

    def wait_for_host(self, why: str | None) -> None:
        """The job waits for its host (``host_share``): its log and its page say so and why, and
        that it holds none of the host's slots meanwhile (an exclusive run has a place of its own)."""
        name = self.settings.worker_name
        if why is None:
            self.report_waiting(None)
            if not self.grant.exclusive:  # an exclusive run says it has the host in any case
                self.sink.system(f"{name} is free: the run starts")
            return
        if why == "jobs":
            others = max(len(list(running_dir(self.settings.work_dir).glob("*"))) - 1, 0)
            words = (
                f"waiting for the {others} other job(s) on {name} to end (each within its wall limit); "
                "no new job starts there until this run has run"
            )
        elif self.grant.exclusive:
            words = f"waiting for another exclusive run on {name} to end"
        else:
            words = f"waiting for an exclusive (ranked) run on {name} to end"
        self.sink.system(words[0].upper() + words[1:])
        self.report_waiting(words)

    def fetch(self) -> Outcome | None:
        """The project, from the server into the job's folder: an Outcome if it cannot be unpacked."""
        shutil.rmtree(self.workdir, ignore_errors=True)
        (self.workdir / "src").mkdir(parents=True)
        (self.workdir / "build").mkdir()
        archive = self.server.fetch_archive(self.job_id, self.workdir / "project.tar.gz")
        try:
            unpack(archive, self.workdir / "src", self.settings.container_user)
        except ArchiveError as exc:
            return Outcome(JobState.error, message=f"the project archive could not be unpacked: {exc}")
        archive.unlink()
        (self.workdir / "build").chmod(0o777)
        return None

    def context(self, gpu_ids: list[str]) -> JobContext:
        """What the executor is told of the job: the grant within this worker's limits."""
        grant, s = self.grant, self.settings
        return JobContext(
            job_id=grant.job_id,
            image=grant.image,
            commands=grant.commands,
            src_dir=self.workdir / "src",
            build_dir=self.workdir / "build",
            wall_seconds=min(grant.wall_seconds or s.wall_seconds, s.wall_seconds),
            command_seconds=grant.command_seconds,
            memory_mb=min(grant.memory_mb or s.memory_mb, s.memory_mb),
            gpu_ids=gpu_ids,
            settings=s,
            repeat_timing=grant.repeat_timing,
            timed=grant.timed,
            gpu_count=grant.gpu_count,
            phases=self.phases,
            report_waiting=self.report_waiting,
        )

    def run_commands(self, executor: Executor, ctx: JobContext, cancel: threading.Event) -> Outcome:
        """The commands (and a ranked job's timed runs), then /build brought to the host."""
        try:
            started = time.monotonic()
            outcome = execute(executor, ctx, self.sink, cancel)
            self.measured.extend(ctx.measured)
            if outcome.state is not JobState.queued and self.lease.reason is None:  # superseded or lost: nothing of it is kept
                cut = executor.collect_build(ctx, cancel)
                if cut is not None and executor.lease_stopped(wait=1.0):  # its watcher stopped the job while /build was copied
                    return Outcome(JobState.queued, message=stopped_words(self.settings))
                if cut is not None:
                    if outcome.state is JobState.succeeded:
                        outcome = cut
                    else:  # the job's own end stands; the log still says what became of /build
                        self.sink.system(cut.message or "the build folder is incomplete")
            # a restart's reason is said by the server's line that puts the job back in the queue
            if outcome.state not in (JobState.succeeded, JobState.failed, JobState.queued) and outcome.message:
                self.sink.system(outcome.message)
            log.info("job %s: %s in %.1f s", self.job_id, outcome.state.value, time.monotonic() - started)
            return outcome
        finally:
            executor.cleanup()

    def report_waiting(self, words: str | None) -> None:
        """A progress note, not a state change: if the server is away the job goes on regardless."""
        try:
            self.server.update(self.job_id, JobUpdate(attempt=self.attempt, state=JobState.running, waiting=words), retry_for=10.0)
        except ServerUnreachable as exc:
            log.warning("job %s: waiting reason not reported: %s", self.job_id, exc)

    def ship_build(self, deadline: float) -> tuple[bool, str | None]:
        """Pack and upload the build folder by ``deadline`` (``_ship_build``)."""
        return _ship_build(self.settings, self.server, self.grant, self.workdir / "build", self.sink, deadline)

    def report(self) -> None:
        """The job's end, to the server (retried through its restart), after the log: when Redis lost
        some of the run's lines, the worker's copy goes first, so the stored log is whole."""
        sink = self.sink
        if not sink.close():  # Redis stayed away: the job's end is still reported
            log.warning("job %s: some log lines could not be written to Redis", self.job_id)
        if sink.superseded:
            return
        if sink.trouble or not sink.whole_in_redis():
            try:
                self.server.upload_log(self.job_id, self.attempt, sink.spool_path)
            except (Refused, ServerUnreachable, ServerTrouble, OSError) as exc:
                log.warning("job %s: the worker's copy of the log was not sent: %s", self.job_id, exc)
        self.lease.reporting = True  # the lease is held until the server took the end (it may be away a while)
        outcome = self.outcome
        try:
            if sink.first_output is not None:
                self.phases.append(Phase(name="first line", at=sink.first_output))
            self.server.update(
                self.job_id,
                JobUpdate(
                    attempt=self.attempt,
                    state=outcome.state,
                    exit_code=outcome.exit_code,
                    failed_command=outcome.failed_command,
                    message=outcome.message,
                    phases=self.phases,
                    measured=self.measured if self.grant.timed else None,
                    gpu_shared_with=outcome.gpu_shared_with,
                ),
            )
        except Refused as exc:
            log.warning("final state of %s refused: %s", self.job_id, exc)


def _watch_cancel(r: redis.Redis, job_id: str, cancel: threading.Event, done: threading.Event) -> None:
    while not done.wait(0.25):
        try:
            if r.exists(cancel_key(job_id)):
                cancel.set()
                return
        except redis.RedisError:
            pass


def _ship_build(
    settings: WorkerSettings, server: ServerClient, grant: ClaimGranted, build: Path, sink: LogSink, deadline: float
) -> tuple[bool, str | None]:
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
        return refuse(
            f"packed, it is {packed // 1024**2} MiB, more than the server stores "
            f"({grant.max_build_bytes // 1024**2} MiB, RAI_MAX_BUILD_BYTES)"
        )
    try:
        server.upload_build(
            job_id,
            attempt,
            tarball,
            seconds=max(deadline - time.monotonic(), MIN_UPLOAD_SECONDS),
            on_wait=lambda why: sink.system(
                f"The server cannot store the build folder yet: {why}; "
                f"the worker keeps it and retries for up to {settings.trouble_seconds / 60:.0f} minutes"
            ),
        )
    except BuildTooLarge as exc:  # a server whose limit the claim did not carry, or a smaller one since
        return refuse(f"the server refused it: {exc}")
    except UploadTooSlow as exc:
        log.warning("job %s: the build folder (%d MiB packed) was not uploaded in time", job_id, packed // 1024**2)
        return refuse(f"{packed // 1024**2} MiB packed; {exc} (RAI_COLLECT_SECONDS)")
    return True, None
