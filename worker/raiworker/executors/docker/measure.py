"""A ranked job's timed runs (issues 23, 32): each in a fresh container started from the build's
result, measured from outside the job's processes (the wall time, or the kernels' durations as
ncu records them, and the CPU time rai-timed reads), its predictions read once every process of
the job has ended.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import tarfile
import threading
import time
from pathlib import Path

from docker.errors import DockerException

from raiprotocol.archive import OverLimit
from raiprotocol.markers import repeat_line, running_line
from raiprotocol.models import MeasuredRun, TimedRun

from ...logsink import LogSink
from ...nvml import GpuWatch, Nvml, profiled_pids, unprofiled
from ...terminal import TIMED_IN_CONTAINER, timed_helper
from ..base import JobContext
from .collect import copy_out
from .container import ContainerJob
from .scripts import (
    FROZE_NOT,
    KEEP_IN,
    KEEP_OUT,
    LEFT_OVER,
    MEASURE_DIR,
    NCU_ATTACH,
    NCU_EXPORT,
    NCU_LAUNCH,
    READ_LIMIT,
    READ_PREDICTIONS,
    THROTTLE_RETRIES,
)


class TimedRuns(ContainerJob):
    """The timed runs of a ranked job, in containers of their own beside the job's."""

    def measure(self, ctx: JobContext, r: int, timed: TimedRun, sink: LogSink) -> MeasuredRun:
        """Timed run ``r`` (issue 32), in a container of its own started from the build's result
        (the files the course keeps, an empty /tmp: nothing a student's code left in the build or
        an earlier timed run is there): the wall time the exec took, seen from here, or the
        kernels' durations as ncu records them, and the CPU time of every process of the run, read
        by rai-timed (root in that container, out of the job's reach), which also freezes every
        process of the job the moment the timed command exits; the predictions and the report are
        read, and the container is killed: nothing of the job runs between the end and the reading."""
        if self.container is None:
            return MeasuredRun(exit_code=137, wall_seconds=0.0, problem="the job's container is gone")
        if r == 1:
            problem = self._keep_build(ctx, timed)
            if problem is not None:
                return MeasuredRun(exit_code=-1, wall_seconds=0.0, problem=problem)
        helper = timed_helper(ctx.settings.work_dir, ctx.settings.timed_helper)
        if helper is None or self.kept is None:
            return MeasuredRun(exit_code=-1, wall_seconds=0.0, problem="this worker cannot measure ranked runs (no rai-timed helper)")
        for attempt in range(1, THROTTLE_RETRIES + 2):
            run = self._measure_fresh(ctx, r, timed, sink, helper)
            slowed = (run.gpu or {}).get("after", {}).get("throttle") or (run.gpu or {}).get("before", {}).get("throttle")
            if not slowed or run.problem or attempt > THROTTLE_RETRIES:
                return run
            sink.system(f"Timed run {r}: the GPU slowed down during it ({', '.join(slowed)}); it runs again")
        return run

    def _measure_fresh(self, ctx: JobContext, r: int, timed: TimedRun, sink: LogSink, helper: Path) -> MeasuredRun:
        build_container = self.container
        try:
            self.container = self._create(
                ctx,
                ctx.src_dir if self.slot_src is None else self.slot_src,
                ctx.job_id,
                self.helper,
                timed=(helper, self.kept, r) if self.kept is not None else None,
            )
            return self._measure_in(ctx, r, timed, sink)
        except DockerException as exc:
            return MeasuredRun(exit_code=-1, wall_seconds=0.0, problem=f"the timed run's container could not start: {str(exc)[:200]}")
        finally:
            timed_container, self.container = self.container, build_container
            if timed_container is not build_container and timed_container is not None:
                with contextlib.suppress(DockerException):
                    timed_container.remove(force=True)

    def _keep_build(self, ctx: JobContext, timed: TimedRun) -> str | None:
        """Once, before the first timed run: end every process of the build, and copy out of its
        /build what the timed runs start from (all of it, or the files the course keeps)."""
        dest = ctx.build_dir.parent / "kept"
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        try:
            code = copy_out(
                self.client.api, self.container.id, ["/bin/sh", "-c", KEEP_OUT, "sh", *(timed.keep or ["."])], self.user, dest, ctx.settings
            )
        except OverLimit as exc:
            return f"the build's result is too large to time: {exc}"
        except (DockerException, tarfile.TarError, OSError) as exc:
            return f"the build's result could not be copied for the timed runs ({exc.__class__.__name__})"
        if code == LEFT_OVER:
            return "a process of the job survived the end of its build"
        if code != 0:
            return f"the build did not leave {', '.join(timed.keep or ['/build'])} (tar status {code})"
        os.chmod(dest, 0o755)
        self.kept = dest
        return None

    def _measure_in(self, ctx: JobContext, r: int, timed: TimedRun, sink: LogSink) -> MeasuredRun:
        code, out = self._exec_as(self.user, KEEP_IN)
        if code != 0:
            return MeasuredRun(
                exit_code=-1,
                wall_seconds=0.0,
                problem=f"the build's result could not be put in place ({out[-200:].decode('utf-8', 'replace')})",
            )
        uid, _, gid = self.user.partition(":")
        cpu_file = f"{MEASURE_DIR}/cpu{r}"  # rai-timed writes the run's CPU time there (root's folder)
        freeze = [TIMED_IN_CONTAINER, uid, gid or uid, cpu_file, *self.wrap, "/bin/sh", "-c"]
        self.measure_dir = MEASURE_DIR
        seed = {"RAI_SEED": str(timed.seeds[r - 1])} if timed.seeds and r <= len(timed.seeds) else None
        watch = self._gpu_watch(ctx, timed, int(uid))
        code, wall, attached = self._run_timed(ctx, r, timed, freeze, sink, seed)
        if watch is not None:
            watch.stop()  # the job is frozen: its processes still hold their GPU contexts
        gpu = {"before": watch.states[0], "after": watch.states[-1]} if watch is not None else None
        cpu = self._cpu_seconds(cpu_file)
        if code == FROZE_NOT:
            return MeasuredRun(
                exit_code=code,
                wall_seconds=wall,
                cpu_seconds=cpu,
                problem="a process of the job kept running after the end of its timed run",
            )
        status, out = self._exec_as(self.user, READ_PREDICTIONS.format(limit=READ_LIMIT), timed.predictions)
        predictions = out.decode("utf-8", "replace") if status == 0 else None
        report = None
        if timed.measure == "kernels":
            if not attached or attached[-1] != 0:  # the last try decides: the first may come before the launcher listens
                return MeasuredRun(
                    exit_code=code,
                    wall_seconds=wall,
                    predictions=predictions,
                    cpu_seconds=cpu,
                    problem=f"the profiler could not attach to the timed run (ncu status "
                    f"{attached[-1] if attached else 'none'}: {self.attach_said.strip()})",
                )
            status, out = self._exec_as("0:0", NCU_EXPORT.format(dir=self.measure_dir, r=r, limit=READ_LIMIT))
            report = out.decode("utf-8", "replace")
            profiled = profiled_pids(report)
            # a run with no kernel in the report is told so by the server ("launched no GPU kernel"),
            # not taken for hidden work: a process that only allocated memory is in no report
            hidden = unprofiled(watch.users, profiled) if watch is not None and profiled else []
            if hidden:
                return MeasuredRun(
                    exit_code=code,
                    wall_seconds=round(wall, 6),
                    predictions=predictions,
                    cpu_seconds=cpu,
                    gpu=gpu,
                    problem=f"a process used the GPU outside the measurement (pid {', '.join(map(str, hidden))} "
                    "in the container, not in the profiler's report)",
                )
        return MeasuredRun(exit_code=code, wall_seconds=round(wall, 6), report=report, predictions=predictions, cpu_seconds=cpu, gpu=gpu)

    def _gpu_watch(self, ctx: JobContext, timed: TimedRun, uid: int) -> GpuWatch | None:
        """Who uses the job's GPUs during a kernels run, and how they run (issue 32); None without NVML."""
        if timed.measure == "kernels" and ctx.gpu_ids:
            lib = Nvml.open()
            if lib is not None:
                return GpuWatch(lib, [int(i) for i in ctx.gpu_ids], self.container.id, uid).start()
        return None

    def _run_timed(
        self, ctx: JobContext, r: int, timed: TimedRun, freeze: list[str], sink: LogSink, seed: dict[str, str] | None
    ) -> tuple[int, float, list[int]]:
        """The timed command under rai-timed (``freeze``), as root there: its exit status, its wall
        time and, for a kernels run (under ncu's launcher, root's ncu attaching), each attach try's status."""
        attached: list[int] = []
        if timed.measure == "kernels":
            sink.system(running_line(f"ncu (rai's timed run {r} of {timed.repeats}) {timed.command}"))
            done = threading.Event()
            attach = threading.Thread(target=self._attach, args=(r, attached, done), name=f"ncu-attach-{ctx.job_id}", daemon=True)
            attach.start()
            started = time.monotonic()
            code = self._run_exec(ctx, [*freeze, NCU_LAUNCH.format(command=shlex.quote(timed.command))], "0:0", sink, seed)
            wall = time.monotonic() - started
            done.set()
            attach.join(timeout=30)
        else:
            sink.system(running_line(timed.command) if r == 1 else repeat_line(r, timed.repeats, timed.command))
            started = time.monotonic()
            code = self._run_exec(ctx, [*freeze, timed.command], "0:0", sink, seed)
            wall = time.monotonic() - started
        return code, wall, attached

    def _cpu_seconds(self, cpu_file: str) -> float | None:
        """The run's CPU time, as rai-timed wrote it (root's folder)."""
        status, out = self._exec_as("0:0", f"cat {cpu_file}")
        try:
            return float(out) if status == 0 else None
        except ValueError:
            return None

    def _attach(self, r: int, attached: list[int], done: threading.Event) -> None:
        """As root: attach ncu to the launcher once it listens (it may take a moment to start)."""
        command = NCU_ATTACH.format(dir=self.measure_dir, r=r)
        deadline = time.monotonic() + 60
        done.wait(0.5)  # the launcher first: it makes ncu's lock folder in /tmp, which root's then shares
        while time.monotonic() < deadline:
            code, out = self._exec_as("0:0", command)
            attached.append(code)
            self.attach_said = out.decode("utf-8", "replace")[-300:]
            if code == 0 or done.is_set():
                return
            time.sleep(0.2)
        self.kill()  # the launcher would wait for the profiler until the job's time ran out
