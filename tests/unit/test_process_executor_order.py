"""The process executor keeps a command's stdout and stderr in the order they were printed, even
when the worker reading them stalls (CI once stored 'err 10' before 'out 10', printed 20 ms apart:
two pipes read through one selector give whichever is ready first all it holds)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from raiprotocol.models import LogStream
from raiworker.config import WorkerSettings
from raiworker.executors.base import JobContext
from raiworker.executors.process import ProcessExecutor
from raiworker.terminal import pty_helper


class StallingSink:
    """A log sink whose first write takes a while, as a worker's does on a loaded host."""

    def __init__(self, stall: float) -> None:
        self.stall = stall
        self.got: list[tuple[LogStream, str]] = []

    def feed(self, stream: LogStream, data: bytes) -> None:
        if self.stall:
            time.sleep(self.stall)
            self.stall = 0
        self.got += [(stream, line) for line in data.decode().splitlines()]

    def system(self, text: str) -> None:
        pass


def test_stdout_and_stderr_keep_their_order_when_the_worker_stalls(tmp_path: Path) -> None:
    settings = WorkerSettings(work_dir=tmp_path / "w")
    if pty_helper(settings.work_dir, settings.pty_helper) is None:
        pytest.skip("no C compiler for rai-pty here")
    build = tmp_path / "job" / "build"
    build.mkdir(parents=True)
    ctx = JobContext(
        job_id="J1", image="-", commands=[], src_dir=tmp_path / "job" / "src", build_dir=build, wall_seconds=60,
        command_seconds=None, memory_mb=512, gpu_ids=[], settings=settings,
    )  # fmt: skip
    ex = ProcessExecutor()
    sink = StallingSink(stall=0.5)
    ex.start(ctx, sink)  # type: ignore[arg-type]
    # while the first line is being handed on (0.5 s), both streams get more: err 1, out 2, err 2
    command = "echo out 1; sleep 0.1; echo err 1 >&2; sleep 0.05; echo out 2; sleep 0.05; echo err 2 >&2; sleep 0.6; echo out 3"
    try:
        assert ex.run_command(ctx, command, sink) == 0  # type: ignore[arg-type]
    finally:
        ex.cleanup()
    said = [line for _, line in sink.got]
    assert said == ["out 1", "err 1", "out 2", "err 2", "out 3"]
    assert [s for s, _ in sink.got] == [LogStream.out, LogStream.err, LogStream.out, LogStream.err, LogStream.out]


def test_a_frame_cut_short_keeps_the_bytes_that_came():
    """The helper killed between a frame's header and the end of its bytes (a timeout, a cancel):
    what came of that frame is still the job's output, on its stream."""
    from raiworker.terminal import Frames

    sink = StallingSink(stall=0)
    frames = Frames(sink)  # type: ignore[arg-type]
    frames.feed(b"\x01\x00\x00\x00\x00\x00\x00\x03ok\n" + b"\x02\x00\x00\x00\x00\x00\x01\x00last wor")
    assert sink.got == [(LogStream.out, "ok")]
    frames.cut_short()
    assert sink.got == [(LogStream.out, "ok"), (LogStream.err, "last wor")] and not frames.buf


def test_without_terminals_a_framed_helper_still_writes_frames(tmp_path: Path) -> None:
    """No /dev/ptmx (here: /dev/null mounted over it, in a mount namespace of the test's): the
    helper runs the command on pipes of its own and its output is frames all the same, never the
    command's bare output where frames are read."""
    import shutil
    import subprocess

    settings = WorkerSettings(work_dir=tmp_path / "w")
    helper = pty_helper(settings.work_dir, settings.pty_helper)
    if helper is None or shutil.which("unshare") is None:
        pytest.skip("no C compiler or no unshare here")
    script = f'mount --bind /dev/null /dev/ptmx && RAI_PTY_FRAMES=1 {helper} sh -c "echo out 1; echo err 1 >&2; tty || true"'
    res = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, timeout=30)
    if res.returncode != 0 and b"mount" in res.stderr + res.stdout:
        pytest.skip(f"no mount namespace here: {res.stderr[:200]!r}")
    from raiworker.terminal import Frames

    sink = StallingSink(stall=0)
    Frames(sink).feed(res.stdout)  # type: ignore[arg-type]
    assert sink.got == [(LogStream.out, "out 1"), (LogStream.err, "err 1"), (LogStream.out, "not a tty")], res
