"""What every executor shares, on a fake executor: commands run in order and the first failure
stops the job with its exit status; the wall clock, the per-command limit and a cancel kill a
hanging command and say which; ranked runs repeat the timed command; the log says each step.
The fake runs nothing, so each rule is seen alone and in a fraction of a second."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
import redis

from raiprotocol.keys import stream_key
from raiprotocol.logwire import decode_entry
from raiprotocol.models import JobState, LogStream
from raiworker.config import WorkerSettings
from raiworker.executors import Executor, JobContext, Outcome, execute
from raiworker.logsink import LogSink


@dataclass
class Step:
    out: list[str] = field(default_factory=list)
    code: int = 0
    hang: bool = False  # runs until killed


class FakeExecutor(Executor):
    name = "fake"

    def __init__(self, script: dict[str, Step]):
        self.script = script
        self.ran: list[str] = []
        self.killed = threading.Event()
        self.cleaned = False

    def start(self, ctx: JobContext, sink: LogSink) -> str:
        return "fake environment ready"

    def run_command(self, ctx: JobContext, command: str, sink: LogSink) -> int:
        self.ran.append(command)
        step = self.script[command]
        for line in step.out:
            sink.feed(LogStream.out, (line + "\n").encode())
        if step.hang:
            self.killed.wait(10)
            return 137
        return step.code

    def kill(self) -> None:
        self.killed.set()

    def cleanup(self) -> None:
        self.cleaned = True


@pytest.fixture
def job(redis_url, tmp_path) -> Iterator[tuple[redis.Redis, str]]:
    r = redis.Redis.from_url(redis_url)
    job_id = f"exec-{time.monotonic_ns()}"
    yield r, job_id
    r.delete(stream_key(job_id))
    r.close()


def run(
    job, commands: list[str], script: dict[str, Step], cancel: threading.Event | None = None, **limits
) -> tuple[Outcome, FakeExecutor, list[tuple[str, str]], JobContext]:
    r, job_id = job
    ex = FakeExecutor(script)
    ctx = JobContext(
        job_id=job_id,
        image="fake",
        commands=commands,
        src_dir=None,
        build_dir=None,  # type: ignore[arg-type]
        wall_seconds=limits.get("wall", 30),
        command_seconds=limits.get("command"),
        memory_mb=64,
        gpu_ids=[],
        settings=WorkerSettings(),
        repeat_timing=limits.get("repeat", 1),
    )
    sink = LogSink(r, job_id, output_bytes=1 << 20, line_bytes=1024)
    outcome = execute(ex, ctx, sink, cancel or threading.Event())
    log = [(b.s, b.x) for b in (decode_entry(i, f) for i, f in r.xrange(stream_key(job_id)))]
    return outcome, ex, log, ctx


def test_commands_run_in_order_and_the_first_failure_stops_the_job(job):
    outcome, ex, log, ctx = run(
        job, ["make", "./a.out", "echo never"], {"make": Step(["built"]), "./a.out": Step(["oops"], code=3), "echo never": Step()}
    )
    assert ex.ran == ["make", "./a.out"]
    assert (outcome.state, outcome.exit_code, outcome.failed_command) == (JobState.failed, 3, "./a.out")
    assert log == [
        ("sys", "fake environment ready"),
        ("sys", "Running: make"),
        ("out", "built"),
        ("sys", "Running: ./a.out"),
        ("out", "oops"),
    ]
    assert [p.name for p in ctx.phases] == ["processes started", "command started", "command ended", "command started", "command ended"]
    assert ctx.phases[-1].detail == "exit 3"


def test_wall_time_kills_the_running_command_and_names_it(job):
    started = time.monotonic()
    outcome, ex, _, _ = run(job, ["true", "sleep forever"], {"true": Step(), "sleep forever": Step(hang=True)}, wall=1)
    assert 1 <= time.monotonic() - started < 5
    assert ex.killed.is_set()
    assert outcome.state is JobState.timed_out and outcome.failed_command == "sleep forever"
    assert "wall-time limit of 1 s" in outcome.message


def test_the_per_command_limit_is_not_the_wall_clock(job):
    outcome, _, _, _ = run(job, ["sleep forever"], {"sleep forever": Step(hang=True)}, wall=30, command=1)
    assert outcome.state is JobState.timed_out and "per-command limit of 1 s" in outcome.message


def test_a_cancel_stops_a_running_command(job):
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    outcome, ex, _, _ = run(job, ["sleep forever", "echo never"], {"sleep forever": Step(hang=True), "echo never": Step()}, cancel=cancel)
    assert (outcome.state, outcome.failed_command) == (JobState.cancelled, "sleep forever")
    assert ex.ran == ["sleep forever"]


def test_a_cancel_before_the_start_runs_nothing(job):
    cancel = threading.Event()
    cancel.set()
    outcome, ex, log, _ = run(job, ["make"], {"make": Step()}, cancel=cancel)
    assert outcome.state is JobState.cancelled and ex.ran == [] and log == []


def test_a_ranked_run_repeats_the_timed_command(job):
    script = {"nvcc": Step(), "./m 100": Step(["Op Time: 1.0 ms"]), "nsys ./m 100": Step(["Op Time: 9 ms"])}
    outcome, ex, log, _ = run(job, ["nvcc", "./m 100", "nsys ./m 100"], script, repeat=3)
    assert outcome.state is JobState.succeeded
    assert ex.ran == ["nvcc", "./m 100", "nsys ./m 100", "./m 100", "./m 100"]  # the profiled run is not timed
    assert [x for s, x in log if x.startswith("Repeat")] == ["Repeat 2 of 3: ./m 100", "Repeat 3 of 3: ./m 100"]


NCU_REFUSED = (
    "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance "
    "Counters on the target device 0. For instructions on enabling permissions and to get more "
    "information see https://developer.nvidia.com/ERR_NVGPUCTRPERM"
)


def test_a_profiler_refused_the_counters_gets_one_line_saying_why(job):
    script = {"ncu ./m 100": Step(["Op Time: 1.0 ms", NCU_REFUSED]), "ncu ./m 10": Step([NCU_REFUSED]), "echo done": Step(["done"])}
    outcome, _, log, _ = run(job, ["ncu ./m 100", "ncu ./m 10", "echo done"], script)
    assert outcome.state is JobState.succeeded  # ncu's own exit status decides, not the line
    said = [i for i, (s, x) in enumerate(log) if s == LogStream.sys.value and "performance counters" in x]
    assert len(said) == 1, log
    assert log[said[0] - 1][1] == NCU_REFUSED and "NVreg_RestrictProfilingToAdminUsers=0" in log[said[0]][1]
    assert log[said[0] + 1][1].startswith("Running: ncu ./m 10")


def test_a_job_without_the_refusal_gets_no_such_line(job):
    _, _, log, _ = run(job, ["ncu ./m 100"], {"ncu ./m 100": Step(["==PROF== Connected to process 110", "Op Time: 1 ms"])})
    assert not any("performance counters" in x for _, x in log)
