"""A ranked job's timed runs (issues 23, 32, 46): each run, first the course's reference and then
the student's program, each in a fresh container started from the build's result, under
rai-timed, which holds the clock, the inputs and the outputs (rai-timed.c): the ranked number is
each operation's time from its begin mark to the freeze after its end mark, whatever ran in
between; the outputs are checked against the reference's on the same inputs, drawn from keys made
here for the run and never shown to the job.

Every run's container is made ahead, while the course's reference runs run (``_Places``): a
timed run then starts in one made for it alone and never used before, and the engine's work of
making and removing containers (a second a run on the H100) is neither in the submission's time
nor beside its timed runs: the containers are removed once the job's end is reported.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import tarfile
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from docker.errors import DockerException, NotFound

from raiprotocol.archive import OverLimit
from raiprotocol.markers import repeat_line, running_line
from raiprotocol.models import MeasuredRun, TimedRun, gpu_slowdowns

from ...gpu.nvml import GpuWatch, Nvml, in_cgroup
from ...logsink import LogSink
from ...terminal import TIMED_IN_CONTAINER, timed_helper
from ..base import JobContext
from .cgroup import NoCgroup, TimedCgroup
from .collect import copy_out
from .container import ContainerJob
from .scripts import (
    KEEP_IN,
    KEEP_OUT,
    LEFT_OVER,
    MEASURE_DIR,
    READ_RESULT,
    TAR_KEPT,
    WRITE_KEYS,
    ending_job,
)
from .timed_result import TimedResult, parse

log = logging.getLogger("raiworker")

BOUND_MAX = 120.0  # a timed run's bound when the course sets none: 20x the reference's, at most this
BOUND_MIN = 5.0  # and at least this (a reference that starts in 50 ms still leaves room for a slow start)
BOUND_FACTOR = 20.0
REFERENCES_AT_ONCE = 5  # the course's reference runs side by side (one GPU context each)
PROFILE_BOUND = 300.0  # the profiled run's bound: a profiler's replay and its report take longer than a run
PLACES_AT_ONCE = 3  # the runs' containers made (and removed) side by side
PLACE_WAIT = 300.0  # the containers made ahead not there by then fail their runs (a stuck engine)
STOP_WAIT = 30.0  # a spent run container's stop, before the next run
AHEAD_BYTES = 512 * 1024**2  # kept files times containers past this: each run's container is made in its turn


@dataclass
class _Ran:
    """One run under rai-timed, as its container saw it."""

    code: int
    wall: float
    result: TimedResult
    problem: str | None = None
    gpu: dict[str, Any] | None = None


@dataclass
class _Place:
    """One run's container, made from the build's result under a cgroup parent of its own; or why
    it could not be had (``failed``)."""

    cgroup: TimedCgroup | None = None
    container: Any = None
    failed: _Ran | None = None

    def stop(self) -> None:
        """Once its run is over, before anything else runs: the container stopped, so that nothing
        of the run goes on (whatever rai-timed left) and its tmpfs (/build, /tmp) holds no memory;
        it is removed with the job."""
        if self.container is None:
            return
        if self.cgroup is not None:  # the run's empty cgroup first: a child left in it keeps the engine's cleanup from its own
            self.cgroup.release_jobs(self.container.id)
        try:
            self.container.kill()
            self.container.wait(timeout=STOP_WAIT)
        except Exception:  # noqa: BLE001 - stopped already, or the engine away (requests' errors are not DockerException)
            log.warning("the run container %s did not stop at once; it is removed with the job", self.container.short_id)

    def remove(self) -> None:
        """The container, then its cgroup parent (the engine cannot remove a cgroup with children)."""
        try:
            if self.container is not None:
                if self.cgroup is not None:
                    self.cgroup.release_jobs(self.container.id)
                self.container.remove(force=True, v=True)
        except NotFound:
            pass
        except Exception as exc:  # noqa: BLE001 - a restarted worker removes it (reap_containers, reap_parents)
            log.warning("run container %s not removed: %s", self.container.short_id, exc)
        if self.cgroup is not None:
            self.cgroup.remove()


def _made(future: Future[_Place]) -> None:
    """A container made after its job stopped waiting for it: removed as soon as it is there."""
    with contextlib.suppress(Exception):
        future.result().remove()


@dataclass
class _Places:
    """A ranked job's run containers: those made ahead (by the run's name: t1…, prof) and those used;
    each serves one run and is removed with the job (``remove_all``)."""

    ahead: dict[str, Future[_Place]] = field(default_factory=dict)
    used: list[_Place] = field(default_factory=list)

    def ready(self, timeout: float) -> None:
        """Wait until every container made ahead is there: none is made beside a timed run."""
        wait(list(self.ahead.values()), timeout=timeout)

    def take(self, name: str) -> _Place | None:
        made = self.ahead.pop(name, None)
        if made is None:
            return None
        if not made.done():  # the engine did not make it in time: it is not made beside the run
            made.add_done_callback(_made)
            return _Place(failed=_Ran(-1, 0.0, TimedResult(), problem="the run's container was not made in time (the container engine)"))
        try:
            return made.result()
        except Exception as exc:  # noqa: BLE001 - the engine failed: this run fails and says so
            return _Place(failed=_Ran(-1, 0.0, TimedResult(), problem=f"the run's container could not be made ({exc.__class__.__name__})"))

    def remove_all(self) -> None:
        """Every container of the job's runs, used or not, side by side; one still being made is
        removed once it is."""
        places, self.used = self.used, []
        for made in self.ahead.values():
            if made.done():
                with contextlib.suppress(Exception):
                    places.append(made.result())
            else:
                made.add_done_callback(_made)
        self.ahead = {}
        if places:
            with ThreadPoolExecutor(max_workers=PLACES_AT_ONCE, thread_name_prefix="rai-unplace") as pool:
                list(pool.map(_Place.remove, places))


class TimedRuns(ContainerJob):
    """The timed runs of a ranked job, in containers of their own beside the job's."""

    _driver: str | None = None
    references: list[tuple[tuple[str, str], _Ran]] | None = None  # each timed run's keys and its reference run
    masked: tuple[Path, list[str]] | None = None  # C25: an empty file, and the image's files that read as it (forbid.py)
    _places: _Places | None = None
    kept_bytes = 0  # the kept files' size: each run's container holds a copy

    @property
    def places(self) -> _Places:
        """This job's run containers (made the first time they are asked for)."""
        if self._places is None:
            self._places = _Places()
        return self._places

    def measure(self, ctx: JobContext, r: int, timed: TimedRun, sink: LogSink) -> MeasuredRun:
        """Timed run ``r``: the student's program on inputs drawn from keys made for this run alone,
        after the course's reference ran on the same ones. A run during which the GPU slowed itself
        down stands, and is flagged for staff (hostile review F3): running it again gave the job a
        do-over it could earn itself (a GPU burnt hot after its operations, seen at the freeze),
        to be drawn again until lucky; what the job can cause never chooses which run counts."""
        if self.container is None:
            return MeasuredRun(exit_code=137, wall_seconds=0.0, problem="the job's container is gone")
        if r == 1:
            problem = self._keep_build(ctx, timed)
            if problem is None and timed.forbid and self.masked is None:
                problem = "the files the course forbids in timed runs were not listed"
            if problem is not None:
                return MeasuredRun(exit_code=-1, wall_seconds=0.0, problem=problem)
        helper = timed_helper(ctx.settings.work_dir, ctx.settings.timed_helper)
        if helper is None or self.kept is None:
            return MeasuredRun(exit_code=-1, wall_seconds=0.0, problem="this worker cannot measure ranked runs (no rai-timed helper)")
        if timed.measure != "op" or not timed.reference:
            return MeasuredRun(
                exit_code=-1, wall_seconds=0.0, problem="the course's build file has no operation to time (measure: op, reference)"
            )
        if self.references is None or len(self.references) < r:
            self.references = self._reference_runs(ctx, timed, sink, helper)
        keys, ref = self.references[r - 1]
        run = self._measure_student(ctx, r, timed, sink, helper, keys, ref)
        slowed = gpu_slowdowns(run.gpu)
        if slowed and not run.problem:
            sink.system(f"Timed run {r}: the GPU slowed down during it ({', '.join(slowed)}); it stands, and staff see it flagged")
        return run

    def profile(self, ctx: JobContext, timed: TimedRun, sink: LogSink) -> None:
        """The course's profiled run: the student's program once more, under the course's profiler
        command, in a fresh container like a timed run's (the forbidden files masked), on inputs
        drawn for it alone; its output is the student's (the kernel table), and nothing of it is
        checked or ranked. The server compares its kernels' total with the measured operations."""
        helper = timed_helper(ctx.settings.work_dir, ctx.settings.timed_helper)
        if self.container is None or helper is None or self.kept is None:
            return
        sink.system(running_line(timed.profile))
        keys = (secrets.token_hex(16), secrets.token_hex(16))
        with self._fresh(ctx, "prof", helper, self.masked, timed) as (cgroup, failed):
            run = failed or self._run_in(ctx, timed.profile, keys, PROFILE_BOUND, sink, cgroup, timed, "prof", watch=False, budget=False)
        why = run.problem or run.result.problem
        if run.result.bound_ms is not None:
            why = f"it was stopped at its bound of {PROFILE_BOUND:g} s"
        elif why is None and run.code != 0:
            why = f"it exited with status {run.code}"
        if why:
            sink.system(f"The profiled run (feedback only; it ranks nothing): {why}")

    def _reference_runs(self, ctx: JobContext, timed: TimedRun, sink: LogSink, helper: Path) -> list[tuple[tuple[str, str], _Ran]]:
        """Before the first timed run: keys for every timed run (the inputs' and the checks', here and
        in root's folders only), and the course's reference run on each, side by side in one
        container of its own (the course's code: its runs need no fresh container, and no time of
        theirs ranks; one after another they were a third of a submission on the H100)."""
        keys = [(secrets.token_hex(16), secrets.token_hex(16)) for _ in range(timed.repeats)]
        sink.system(f"Reference runs: the course's {timed.reference}, on each timed run's inputs")
        with self._fresh(ctx, "ref", helper, None, timed) as (cgroup, failed):
            if failed is not None:
                return [(k, failed) for k in keys]
            places = self._make_ahead(ctx, timed, helper)

            def one(numbered: tuple[int, tuple[str, str]]) -> _Ran:
                r, keys = numbered
                return self._run_in(
                    ctx, timed.reference, keys, None, sink, cgroup, timed, f"ref{r}", watch=False, passes=timed.passes, check_at_end=True
                )

            with ThreadPoolExecutor(max_workers=min(len(keys), REFERENCES_AT_ONCE), thread_name_prefix="rai-ref") as pool:
                runs = list(pool.map(one, enumerate(keys, 1)))
            places.ready(PLACE_WAIT)  # every run's container there before the first timed run
        return list(zip(keys, runs, strict=True))

    def _measure_student(
        self, ctx: JobContext, r: int, timed: TimedRun, sink: LogSink, helper: Path, keys: tuple[str, str], ref: _Ran
    ) -> MeasuredRun:
        ref_problem = ref.problem or ref.result.problem
        if ref_problem is None and ref.code != 0:
            ref_problem = f"it exited with status {ref.code}"
        bound = timed.bound_seconds or min(BOUND_MAX, max(BOUND_MIN, BOUND_FACTOR * ref.wall))
        sink.system(running_line(timed.command) if r == 1 else repeat_line(r, timed.repeats, timed.command))
        with self._fresh(ctx, f"t{r}", helper, self.masked, timed) as (cgroup, failed):
            run = failed or self._run_in(ctx, timed.command, keys, bound, sink, cgroup, timed, "run", passes=timed.passes)
        problem = run.problem or run.result.problem
        if run.result.bound_ms is not None:
            problem = f"it was stopped at its bound of {bound:.3g} s (the course's reference took {ref.wall:.3g} s)"
        return MeasuredRun(
            exit_code=run.result.exit_code if run.result.exit_code is not None else run.code,
            wall_seconds=round(run.wall, 6),
            cpu_seconds=run.result.cpu_seconds,
            problem=problem,
            gpu=run.gpu,
            ops=run.result.ops,
            reference=ref.result.ops,
            reference_seconds=round(ref.wall, 6),
            reference_problem=f"the course's reference failed: {ref_problem}" if ref_problem else None,
            bound_seconds=round(bound, 3),
            passes=timed.passes,
        )

    def _make_ahead(self, ctx: JobContext, timed: TimedRun, helper: Path) -> _Places:
        """Start making every timed run's container and the profiled run's, side by side with the
        reference runs: none of the engine's work is then between or beside the timed runs. Each
        holds a copy of the kept files: past AHEAD_BYTES in all (a build that kept a huge file),
        each is made in its turn instead."""
        places = self.places
        names = [f"t{r}" for r in range(1, timed.repeats + 1)] + (["prof"] if timed.profile else [])
        if self.kept_bytes * len(names) > AHEAD_BYTES:
            return places
        maker = ThreadPoolExecutor(max_workers=PLACES_AT_ONCE, thread_name_prefix="rai-place")
        for name in names:
            places.ahead[name] = maker.submit(self._place, ctx, name, helper, self.masked, timed)
        maker.shutdown(wait=False)
        return places

    def _place(self, ctx: JobContext, name: str, helper: Path, masked: tuple[Path, list[str]] | None, timed: TimedRun) -> _Place:
        """A container of its own made from the build's result, under a cgroup parent of its own,
        with the kept files in place; or why it could not be had, as a failed run. A timed run
        (``t1``…) under the course's CPU budget has WorkerSettings.timed_cpus for its quota, and so
        has the reference's (the course's code, side by side, and rai-timed drawing and checking
        every pass of each: under the job's 4 CPUs, 10 passes of ECE 408's took 9 s on the H200);
        the profiled run keeps the job's."""
        quota = not (name == "ref" or (name.startswith("t") and timed.cpu_seconds is not None))
        assert self.kept is not None
        nothing = ctx.build_dir.parent / "no-src"  # /src: a timed run starts from the kept build alone (C25: no
        nothing.mkdir(mode=0o755, exist_ok=True)  # library or data the student brought among their files)
        try:
            place = _Place(TimedCgroup.make(self._cgroup_driver()))
        except NoCgroup as exc:
            return _Place(failed=_Ran(-1, 0.0, TimedResult(), problem=f"this worker cannot time ranked runs: {exc}"))
        try:
            place.container = self._create(
                ctx, nothing, ctx.job_id, self.helper, (helper, self.kept, name), place.cgroup, masked, quota=quota
            )
            code, out = self._exec_as(self.user, KEEP_IN, container=place.container)
        except Exception as exc:  # noqa: BLE001 - the engine's errors are not all DockerException (requests' timeouts)
            place.failed = _Ran(-1, 0.0, TimedResult(), problem=f"the timed run's container could not start: {str(exc)[:200]}")
            return place
        if code != 0:
            why = f"the build's result could not be put in place ({out[-200:].decode('utf-8', 'replace')})"
            place.failed = _Ran(-1, 0.0, TimedResult(), problem=why)
        return place

    @contextlib.contextmanager
    def _fresh(
        self, ctx: JobContext, name: str, helper: Path, masked: tuple[Path, list[str]] | None, timed: TimedRun
    ) -> Iterator[tuple[TimedCgroup, _Ran | None]]:
        """The run's own container (made ahead, or now) as the job's container while the run runs:
        (its cgroup, None), or (…, why it could not be had as a failed run). Once the run is over
        the container is stopped before anything else runs, and removed with the job."""
        places = self.places
        place = places.take(name) or self._place(ctx, name, helper, masked, timed)
        places.used.append(place)
        if place.failed is not None or place.cgroup is None:
            yield TimedCgroup(Path("/nonexistent"), ""), place.failed or _Ran(-1, 0.0, TimedResult(), problem="no container")
            return
        build_container, self.container = self.container, place.container
        try:
            yield place.cgroup, None
        finally:
            self.container = build_container
            place.stop()

    def remove_runs(self) -> None:
        """After the job's end is reported: every run's container and cgroup parent removed (tidy)."""
        places, self._places = self._places, None
        if places is not None:
            places.remove_all()

    def _run_in(
        self,
        ctx: JobContext,
        command: str,
        keys: tuple[str, str],
        bound: float | None,
        sink: LogSink,
        cgroup: TimedCgroup,
        timed: TimedRun,
        slot: str,
        watch: bool = True,
        budget: bool = True,
        passes: int = 1,
        check_at_end: bool = False,
    ) -> _Ran:
        """``command`` under rai-timed in this container, in a cgroup of its own (``slot``), with ``keys``;
        ``budget``: the course's CPU budget holds (a timed run's; not a profiler's); ``passes``: how
        many times over the course's harness does its operations (RAI_OP_PASSES); ``check_at_end``: each
        operation's outputs checked at its end mark (the course's reference runs: trusted code)."""
        try:
            job_cgroup = cgroup.job(self.container.id, slot)
        except OSError as exc:
            return _Ran(-1, 0.0, TimedResult(), problem=f"the timed run's cgroup could not be made ({exc.strerror})")
        out_dir = f"{MEASURE_DIR}/{slot}"
        code, _ = self._exec_as("0:0", WRITE_KEYS, out_dir, *keys)  # no process of the job runs yet to see this exec
        if code != 0:
            return _Ran(-1, 0.0, TimedResult(), problem="the run's keys could not be put in place")
        uid, _, gid = self.user.partition(":")
        argv = [TIMED_IN_CONTAINER, "--uid", uid, "--gid", gid or uid, "--cgroup", job_cgroup, "--out", out_dir]
        argv += ["--secrets", f"{out_dir}/keys", "--max-bytes", str(timed.max_bytes)]
        if check_at_end:
            argv += ["--check-at-end", "1"]
        if bound is not None:
            argv += ["--bound-ms", str(int(bound * 1000))]
            if timed.cpu_seconds is not None and budget:  # the student's timed runs only (the reference's have no bound)
                argv += ["--cpu-budget-ms", str(max(1, int(timed.cpu_seconds * 1000)))]
        if passes > 1:
            command = f"RAI_OP_PASSES={int(passes)}; export RAI_OP_PASSES; {command}"
        argv += ["--", *self.wrap, "/bin/sh", "-c", command]
        gpu_watch = self._gpu_watch(ctx) if watch else None
        started = time.monotonic()
        code = self._run_exec(ctx, argv, "0:0", sink)
        wall = time.monotonic() - started
        if gpu_watch is not None:
            gpu_watch.stop()
        gpu = {"before": gpu_watch.states[0], "after": gpu_watch.states[-1]} if gpu_watch is not None else None
        status, out = self._exec_as("0:0", READ_RESULT, out_dir)
        if status != 0 or not out:
            return _Ran(code, wall, TimedResult(), problem=f"rai-timed left no result (status {code})", gpu=gpu)
        return _Ran(code, wall, parse(out.decode("ascii", "replace")), gpu=gpu)

    def _cgroup_driver(self) -> str | None:
        if TimedRuns._driver is None:
            with contextlib.suppress(DockerException):
                TimedRuns._driver = str(self.client.info().get("CgroupDriver") or "")
        return TimedRuns._driver

    def _keep_build(self, ctx: JobContext, timed: TimedRun) -> str | None:
        """Once, before the first timed run: end every process of the build, and copy out of its
        /build what the timed runs start from (all of it, or the files the course keeps)."""
        dest = ctx.build_dir.parent / "kept"
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        try:
            code = copy_out(
                self.client.api,
                self.container.id,
                ending_job(self.ends_job, TAR_KEPT, KEEP_OUT, tuple(timed.keep or ["."])),
                self.user,
                dest,
                ctx.settings,
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
        self.kept_bytes = sum(f.stat().st_size for f in dest.rglob("*") if f.is_file() and not f.is_symlink())
        return None

    def _gpu_watch(self, ctx: JobContext) -> GpuWatch | None:
        """The GPU's clocks, temperature and throttle reasons, and other processes on it, before and
        after the run; None without NVML."""
        if ctx.gpu_ids:
            lib = Nvml.open()
            if lib is not None:
                container_id = self.container.id
                return GpuWatch(lib, [int(i) for i in ctx.gpu_ids], lambda pid: in_cgroup(pid, container_id)).start()
        return None
