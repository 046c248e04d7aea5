"""What every executor shares: run the commands in order, stop at the first failure, and enforce
wall time, per-command time and cancellation from a watchdog thread that kills the job.
"""

from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from raiprotocol.markers import command_of, is_profiled, repeat_line, running_line
from raiprotocol.models import JobState, MeasuredRun, Phase, TimedRun

from ..config import WorkerSettings
from ..gpu import counters
from ..gpu.holds import ProfilerTurn, profiler_turn
from ..lease import stopped_words
from ..logsink import LogSink

log = logging.getLogger("raiworker")


@dataclass
class JobContext:
    job_id: str
    image: str
    commands: list[str]
    src_dir: Path
    build_dir: Path
    wall_seconds: int
    command_seconds: int | None
    memory_mb: int
    gpu_ids: list[str]
    settings: WorkerSettings
    repeat_timing: int = 1
    gpu_count: int = 0  # asked for; gpu_ids are this host's (empty where the GPUs are elsewhere: Slurm)
    phases: list[Phase] = field(default_factory=list)  # when each step happened, for the job's timeline
    wall_deadline: float = float("inf")  # time.monotonic() when the wall clock runs out (set once it starts)
    # tells the server the job waits in a batch system, and why (None: it started there)
    report_waiting: Callable[[str | None], None] = lambda words: None
    timed: TimedRun | None = None  # a ranked run: the course's timed command, measured by the executor
    measured: list[MeasuredRun] = field(default_factory=list)  # what each timed run gave
    profiler_lock: Path | None = None  # its GPU is shared: profiling commands take turns on this lock (gpu.holds.profiler_turn)
    profiler_turn_seconds: int = 120  # the most a turn is held while another job's profiler waits
    gpu_memory_share_mb: int | None = None  # its GPU is shared: the device memory its processes may hold (gpu.nvml.MemoryShare)
    gpu_jobs_per_gpu: int = 1  # how many jobs its queue lets share the GPU (for what the job is told)
    # a ranked run, before timed run N (its reference runs with the first): the jobs waiting for the host run first
    between_runs: Callable[[int, Callable[[], bool]], None] = lambda r, stopped: None

    def phase(self, name: str, detail: str | None = None) -> None:
        self.phases.append(Phase(name=name, at=datetime.now(timezone.utc), detail=detail))


@dataclass
class Outcome:
    state: JobState
    exit_code: int | None = None
    failed_command: str | None = None
    message: str | None = None
    gpu_shared_with: int | None = None  # the most other jobs on its GPU beside it (None: no GPU)


@dataclass
class _Watch:
    deadline: float = float("inf")
    reason: str | None = None  # "cancel" | "wall" | "command" | "profiler"
    wall_deadline: float = float("inf")
    command: str = ""
    stop: threading.Event = field(default_factory=threading.Event)
    turn: ProfilerTurn | None = None  # the shared GPU's profiler turn the running command holds

    def overstayed(self, limit: float) -> bool:
        """The running command held the profiler's turn past ``limit`` s while another job waited."""
        turn = self.turn
        return turn is not None and time.monotonic() - turn.since > limit and turn.others_waiting()

    def arm(self, ctx: JobContext, command: str) -> None:
        """``command`` runs now: it is stopped at the wall clock's end, or at its own limit if sooner."""
        now = time.monotonic()
        self.deadline = min(self.wall_deadline, now + ctx.command_seconds) if ctx.command_seconds else self.wall_deadline
        self.command = command


class Executor(ABC):
    name: str = "?"
    started_phase: str = "processes started"  # the job's timeline step once start() returned

    @classmethod
    def create(cls, settings: WorkerSettings) -> Executor:
        """The executor for one job."""
        return cls()

    @classmethod
    def prepare_host(cls, settings: WorkerSettings, gpu_indexes: list[int]) -> list[str]:
        """Once, as the worker starts, before its pool: tidy what an earlier run left and check the
        host can run jobs (ExecutorUnavailable if not). Returns lines for the worker's log: here,
        whether jobs on this host's GPUs may read their profiling counters."""
        line = counters.startup_line() if gpu_indexes else None
        return [line] if line else []

    @classmethod  # noqa: B027 - an optional hook: most executors have nothing to do
    def host_stopping(cls, settings: WorkerSettings) -> None:
        """Once, as the worker's pool has stopped."""

    @classmethod  # noqa: B027 - an optional hook: most executors have nothing to do
    def tidy_host(cls, settings: WorkerSettings) -> None:
        """At each heartbeat, from the worker's main process: remove what runs that are gone left
        (a killed or paused pool process's job, which its lease's watcher ended)."""

    def lease_stopped(self, wait: float = 0.0) -> bool:
        """Whether the lease's watcher stopped the job (its stamp ran out: the run was paused or cut
        off), so that the run ends as a restart, not as the command's failure (``lease.LEASE_EXIT``).
        ``wait``: how long a job whose command was just killed may take to show it."""
        return False

    @abstractmethod
    def start(self, ctx: JobContext, sink: LogSink) -> str:
        """Prepare the job's environment; return a sentence for the log ("started the container …")."""

    @abstractmethod
    def run_command(self, ctx: JobContext, command: str, sink: LogSink) -> int:
        """Run one command to its end (or until killed); return its exit status."""

    @abstractmethod
    def kill(self) -> None:
        """Stop everything the job runs, now. Called from the watchdog thread."""

    def collect_build(self, ctx: JobContext, cancel: threading.Event | None = None) -> Outcome | None:
        """Bring the job's /build to ``ctx.build_dir`` on the host, if it lives elsewhere, within
        the job's wall clock and limits; an Outcome when the copy was cut or incomplete."""
        return None

    @abstractmethod
    def cleanup(self) -> None:
        """Stop what start() made, whatever happened, before the job's end is reported."""

    def tidy(self) -> None:  # noqa: B027 - an optional hook: most executors have nothing to do
        """After the job's end is reported: work nobody waits for (removing what is left,
        preparing the next job)."""

    def measure(self, ctx: JobContext, r: int, timed: TimedRun, sink: LogSink) -> MeasuredRun:
        """Timed run ``r`` of a ranked job, measured from outside the job's processes, its
        predictions read once every process of the job has ended (issue 23)."""
        return MeasuredRun(
            exit_code=-1, wall_seconds=0.0, problem=f"the {self.name} executor cannot measure ranked runs; they need the Docker executor"
        )

    def profile(self, ctx: JobContext, timed: TimedRun, sink: LogSink) -> None:  # noqa: B027 - optional
        """After the timed runs, the course's profiled run (``timed.profile``): the student's
        program once more under a profiler, untimed, its output the student's feedback."""

    def explain_kill(self, code: int, ctx: JobContext) -> str | None:
        """A reason for a command that died of a signal (e.g. out of memory), if known."""
        return None

    def ended(self, code: int, ctx: JobContext) -> Outcome | None:
        """When a command failed because the job's environment itself ended (a batch system's
        time limit, a lost node), the job's outcome instead of a failed command."""
        return None


def execute(executor: Executor, ctx: JobContext, sink: LogSink, cancel: threading.Event) -> Outcome:
    watch = _Watch()
    thread = threading.Thread(target=_watchdog, args=(watch, executor, ctx, cancel), name=f"watchdog-{ctx.job_id}", daemon=True)
    thread.start()
    try:
        if cancel.is_set():
            return Outcome(JobState.cancelled, message="cancelled before it started")
        sink.system(executor.start(ctx, sink))
        ctx.phase(executor.started_phase, ctx.image)
        # the wall clock runs from here: time waiting for a container or in a batch queue is not the job's
        watch.wall_deadline = ctx.wall_deadline = time.monotonic() + ctx.wall_seconds
        failed = _run_commands(executor, ctx, sink, watch)
        if failed is None:
            failed = _timed_runs(executor, ctx, sink, watch)
        if failed is not None:
            return failed
    finally:
        watch.stop.set()
        thread.join(timeout=5)
        sink.flush()
    return _watched_end(watch, ctx)


def _watchdog(watch: _Watch, executor: Executor, ctx: JobContext, cancel: threading.Event) -> None:
    """Kill the job on a cancel, or past the wall clock or the running command's limit."""
    while not watch.stop.wait(0.05):
        if cancel.is_set():
            watch.reason = "cancel"
        elif time.monotonic() > watch.deadline:
            watch.reason = "wall" if watch.deadline >= watch.wall_deadline else "command"
        elif watch.overstayed(ctx.profiler_turn_seconds):
            watch.reason = "profiler"
        if watch.reason:
            try:
                executor.kill()
            except Exception:  # noqa: BLE001 - said, not swallowed: the job still ends as killed
                log.exception("job %s: killing it failed", ctx.job_id)
            return


def _run_commands(executor: Executor, ctx: JobContext, sink: LogSink, watch: _Watch) -> Outcome | None:
    """The commands in order, and a ranked job's timing command again; the outcome of the first
    that failed, None when none did or the watchdog stopped them (``watch.reason``)."""
    timing: str | None = None
    repeated = refusal_said = False
    plan = [(command, running_line(command)) for command in ctx.commands]
    while plan:
        command, announce = plan.pop(0)
        watch.arm(ctx, command)
        if watch.reason:
            return None
        sink.system(announce)
        sink.op_time_seen = False
        ctx.phase("command started", command)
        with _profiler_turn(ctx, command, sink, watch) as go:
            code = executor.run_command(ctx, command, sink) if go else 137
        sink.flush()
        if sink.counters_refused and not refusal_said:  # once, after the command whose profiler was refused
            refusal_said = True
            sink.system(counters.refused_line(ctx.settings.worker_name))
        ctx.phase("command ended", f"exit {code}")
        if watch.reason:
            return None
        if code != 0:
            return _failed(executor, ctx, sink, watch, command, code)
        if timing is None and sink.op_time_seen and not is_profiled(command) and command_of(announce) is not None:
            timing = command
        if not plan and timing is not None and not repeated and ctx.repeat_timing > 1:  # ranked: time it K times
            plan = [(timing, repeat_line(r, ctx.repeat_timing, timing)) for r in range(2, ctx.repeat_timing + 1)]
            repeated = True
    return None


@contextmanager
def _profiler_turn(ctx: JobContext, command: str, sink: LogSink, watch: _Watch) -> Iterator[bool]:
    """A profiling command on a shared GPU waits for the other jobs' profilers on it (its time runs)."""
    if ctx.profiler_lock is None or not is_profiled(command):
        yield True
        return
    said = (
        "Another job on this shared GPU is profiling: this command waits its turn (profilers take turns on a shared GPU; "
        f"a command holds the turn at most {ctx.profiler_turn_seconds} s while another waits)"
    )
    with profiler_turn(ctx.profiler_lock, lambda: bool(watch.reason), lambda: sink.system(said)) as turn:
        watch.turn = turn
        try:
            yield turn is not None
        finally:
            watch.turn = None


def _lease_end(executor: Executor, ctx: JobContext, code: int) -> Outcome | None:
    """A command killed because the run's lease ran out: a restart, not the command's failure."""
    if code == 137 and executor.lease_stopped(wait=1.0):  # a watcher kills with SIGKILL
        return Outcome(JobState.queued, message=stopped_words(ctx.settings))
    return None


def _failed(executor: Executor, ctx: JobContext, sink: LogSink, watch: _Watch, command: str, code: int) -> Outcome:
    """A command that exited non-zero: the job's environment ended (its lease's watcher stopped it,
    or ``Executor.ended``), or it failed."""
    lapsed = _lease_end(executor, ctx, code)
    if lapsed is not None:
        return lapsed
    if not watch.reason:
        ended = executor.ended(code, ctx)
        if ended is not None:
            return Outcome(ended.state, ended.exit_code, ended.failed_command or command, ended.message)
    why = executor.explain_kill(code, ctx)
    if why:
        sink.system(why)
    return Outcome(JobState.failed, exit_code=code, failed_command=command, message=why)


def _others_first(ctx: JobContext, watch: _Watch, r: int) -> bool:
    """Before run ``r`` of a ranked job (the timed runs, then the profiled run): the jobs waiting
    for the host run first; the time they take is not the job's. False: it was cancelled meanwhile."""
    watch.deadline, paused = float("inf"), time.monotonic()
    ctx.between_runs(r, lambda: watch.reason is not None)
    spent = time.monotonic() - paused
    watch.wall_deadline = ctx.wall_deadline = ctx.wall_deadline + spent
    return not watch.reason


def _timed_runs(executor: Executor, ctx: JobContext, sink: LogSink, watch: _Watch) -> Outcome | None:
    """A ranked job's timed runs, measured by the executor (``ctx.measured``); the outcome of the
    first that failed, None when none did or the watchdog stopped them."""
    timed = ctx.timed
    if timed is None or watch.reason:
        return None
    for r in range(1, timed.repeats + 1):
        if not _others_first(ctx, watch, r):
            return None
        watch.arm(ctx, timed.command)
        ctx.phase("timed run started", str(r))
        run = executor.measure(ctx, r, timed, sink)
        sink.flush()
        ctx.measured.append(run)
        if watch.reason:
            return None
        if run.problem or run.exit_code != 0:
            lapsed = _lease_end(executor, ctx, 137 if run.exit_code <= 0 else run.exit_code)  # its container may be gone
            if lapsed is not None:
                return lapsed
            why = run.problem or executor.explain_kill(run.exit_code, ctx)
            if why:
                sink.system(f"Timed run {r}: {why}")
            return Outcome(
                JobState.failed, exit_code=run.exit_code if run.exit_code > 0 else None, failed_command=timed.command, message=why
            )
    if timed.profile:  # feedback and the server's cross-check; nothing of it ranks or fails the job
        if not _others_first(ctx, watch, timed.repeats + 1):
            return None
        watch.arm(ctx, timed.profile)
        ctx.phase("profiled run started")
        executor.profile(ctx, timed, sink)
        sink.flush()
    return None


def _watched_end(watch: _Watch, ctx: JobContext) -> Outcome:
    """The end of a job whose commands did not fail: what the watchdog stopped it for, if anything."""
    if watch.reason == "cancel":
        return Outcome(JobState.cancelled, failed_command=watch.command, message=f"stopped while '{watch.command}' was running")
    if watch.reason == "wall":
        return Outcome(
            JobState.timed_out,
            failed_command=watch.command,
            message=f"timed out: '{watch.command}' was running when the job hit its wall-time limit of {ctx.wall_seconds} s",
        )
    if watch.reason == "command":
        return Outcome(
            JobState.timed_out,
            failed_command=watch.command,
            message=f"timed out: '{watch.command}' hit the per-command limit of {ctx.command_seconds} s",
        )
    if watch.reason == "profiler":
        return Outcome(
            JobState.timed_out,
            failed_command=watch.command,
            message=(
                f"stopped: '{watch.command}' held this shared GPU's profiler for more than {ctx.profiler_turn_seconds} s "
                "while another job's profiling command waited its turn (profilers take turns on a shared GPU: "
                "profile less in one command, e.g. ncu -c or -k, or in several commands)"
            ),
        )
    return Outcome(JobState.succeeded, exit_code=0)
