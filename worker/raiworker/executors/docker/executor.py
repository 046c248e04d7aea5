"""Runs a job in one Docker container: the commands are exec'd into it one after another.

Starting a container is most of a short job's overhead, so once a job's end is reported its slot
starts the next container ahead of time (``spares``); a job that needs anything else gets a
container of its own, and the spare one is removed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
import time
from pathlib import Path

from docker.errors import DockerException, ImageNotFound

from ...config import WorkerSettings
from ...errors import ExecutorUnavailable
from ...gpu import access as gpu_access
from ...gpu.nvml import MemoryShare, Nvml, in_cgroup
from ...images import is_offered
from ...logsink import LogSink
from ...terminal import IN_CONTAINER, ends_job, hands_over, no_terminal_note, pty_helper
from ...workdir import slot_dir
from ..base import JobContext, Outcome
from .cgroup import reap_parents
from .client import LABEL, SPARE, _remove_later, container_name, reap_containers, remove_container, remove_lapsed, shared_client
from .collect import collect_build
from .forbid import Unlisted, empty_file, forbidden_files
from .measure import TimedRuns
from .scripts import COLLECT, COLLECT_AFTER, COLLECT_AFTER_HELPER, KILL_JOB, TAR_BUILD, ending_job
from .spares import _empty, _move_entries, _slot, _Spare, spare_key

log = logging.getLogger("raiworker")


class DockerExecutor(TimedRuns):
    """A job in a container of its own (or its slot's spare one); its commands exec'd into it."""

    name = "docker"
    started_phase = "container started"

    @classmethod
    def create(cls, settings: WorkerSettings) -> DockerExecutor:
        return cls(spares=settings.spare_containers)

    @classmethod
    def prepare_host(cls, settings: WorkerSettings, gpu_indexes: list[int]) -> list[str]:
        """The engine answers; containers an earlier run of this worker left are removed (a lost
        run must not go on beside its re-run); how jobs get their GPUs is decided once, here."""
        client = shared_client()
        lines = super().prepare_host(settings, gpu_indexes)
        removed = reap_containers(client, settings.worker_name)
        if removed:
            lines.append(f"removed {removed} container(s) left by an earlier run")
        if gpu_indexes:  # the pool processes inherit the decision
            lines.append(gpu_access.current(settings, gpu_indexes, lambda: client.info().get("Runtimes")).line)
        return lines

    @classmethod
    def host_stopping(cls, settings: WorkerSettings) -> None:
        """The pool has stopped: its spare containers have no next job."""
        if settings.spare_containers:
            try:
                reap_containers(shared_client(), settings.worker_name, spares_only=True)
            except Exception as exc:  # noqa: BLE001 - the next start removes them
                log.warning("spare containers not removed: %s", exc)

    @classmethod
    def tidy_host(cls, settings: WorkerSettings) -> None:
        n = remove_lapsed(shared_client(), settings.worker_name)
        if n:
            log.info("removed %d container(s) whose lease ran out (a run whose process was killed or paused, or a dead worker's spare)", n)
        n = reap_parents()
        if n:
            log.info("removed %d timed runs' cgroup folder(s) that no container uses (a run that never ended)", n)

    def start(self, ctx: JobContext, sink: LogSink) -> str:
        s = ctx.settings
        self.ctx = ctx
        self.helper = helper = pty_helper(s.work_dir, s.pty_helper)
        if helper is None:
            sink.system(no_terminal_note())
        else:
            self.wrap = [IN_CONTAINER]
            self.ends_job = ends_job(helper)
        self.user = s.container_user
        gpu = f", GPU {','.join(ctx.gpu_ids)}" if ctx.gpu_ids else ""
        lost = self._stop_lost_run(ctx)
        if lost:
            sink.system(f"Stopped the container of an earlier run of this job on {s.worker_name} (its process was lost)")
        forbid = ctx.timed.forbid if ctx.timed is not None else []
        spare = _slot.take(spare_key(ctx)) if self.spares and not forbid else None  # a spare has no masks
        if spare is not None and _move_entries(ctx.src_dir, spare.src):  # the slot's folder was empty: this job's files only
            self.container, self.slot_src = spare.container, spare.src
            with contextlib.suppress(DockerException):  # from now on the container is known by its job, as one made for it is
                spare.container.rename(container_name(ctx.job_id, s.worker_name))
            self._watch_gpu_memory(ctx, sink)
            return f"Worker {s.worker_name} started the container ahead of time (image {ctx.image}{gpu})"
        if spare is not None:
            _remove_later(spare.container)
        try:
            image = self.client.images.get(ctx.image)
        except ImageNotFound:
            raise ExecutorUnavailable(f"image {ctx.image} is not on worker {s.worker_name}; the operator must load it") from None
        if not is_offered(image, s):  # by its id: a label (inherited by images built FROM it) grants nothing
            raise ExecutorUnavailable(
                f"image {ctx.image} is not offered to jobs on worker {s.worker_name}: only images its "
                "operator published are (raiworker publish, RAI_WORKER_IMAGES, or pulled through rai)"
            )
        if forbid:
            try:
                paths = forbidden_files(self.client, image.id, forbid, s.worker_name)
            except Unlisted as exc:
                raise ExecutorUnavailable(str(exc)) from None
            self.masked = (empty_file(ctx.build_dir.parent), paths)
            sink.system(f"The course forbids {', '.join(forbid)}: {len(paths)} such file(s) of the image read as empty in this run")
        self.container = self._create(ctx, self._build_src(ctx), ctx.job_id, helper, masked=self.masked)
        self._watch_gpu_memory(ctx, sink)
        return f"Worker {s.worker_name} started the container (image {ctx.image}{gpu})"

    def _build_src(self, ctx: JobContext) -> Path:
        """The build's /src: the job's files, or for a ranked run only those its course's build reads
        (``ranked.build_files``): a report never reaches the compiler (C25)."""
        names = ctx.timed.build_files if ctx.timed is not None else None
        if names is None:
            return ctx.src_dir
        only = ctx.build_dir.parent / "build-src"
        only.mkdir(mode=0o755, exist_ok=True)
        for name in names:
            source = ctx.src_dir / name
            if source.is_file() and not source.is_symlink():
                shutil.copyfile(source, only / name)
                (only / name).chmod(0o644)
        return only

    def _watch_gpu_memory(self, ctx: JobContext, sink: LogSink) -> None:
        """A shared run's GPU memory share (``gpu.nvml.MemoryShare``): over it, the job is killed and told why."""
        if not ctx.gpu_memory_share_mb or not ctx.gpu_ids or self.container is None:
            return
        lib = Nvml.open()
        if lib is None:
            return
        container_id, share = self.container.id, ctx.gpu_memory_share_mb

        def over(used: int) -> None:
            self.memory_over = (
                f"killed: the job held {used // 1024**2} MiB of GPU memory, more than its share of GPU {ctx.gpu_ids[0]} "
                f"({share} MiB: the GPU is shared by up to {ctx.gpu_jobs_per_gpu} jobs)"
            )
            self.kill()  # the failed command's line says why (explain_kill); no later command runs

        self.memory_watch = MemoryShare(lib, int(ctx.gpu_ids[0]), lambda pid: in_cgroup(pid, container_id), share * 1024**2, over).start()

    def _stop_lost_run(self, ctx: JobContext) -> bool:
        """A run of this job whose pool process died (kill -9) left its containers running, unseen
        (the job's, and a ranked job's run containers, ``<name>-ref``, ``-t1``…): remove them before
        the job runs again. Returns whether there was one."""
        api, worker = self.client.api, ctx.settings.worker_name
        found = False
        try:
            labelled = api.containers(all=True, filters={"label": [f"{LABEL}={ctx.job_id}", f"rai.worker={worker}"]})
            for name in [container_name(ctx.job_id, worker), *(c["Id"] for c in labelled)]:  # by name: a spare it took
                found = remove_container(api, name) or found
        except DockerException as exc:
            raise ExecutorUnavailable(f"the container of a lost earlier run of job {ctx.job_id} could not be removed: {exc}") from None
        return found

    def _make_spare(self, ctx: JobContext, helper: Path | None) -> _Spare:
        src = slot_dir(ctx.settings.work_dir) / "src"
        src.mkdir(parents=True, exist_ok=True)
        if not _empty(src):  # never show a job anything of an earlier one
            raise ExecutorUnavailable(f"{src} could not be emptied; no spare container")
        if os.geteuid() == 0:  # as unpack() leaves a job's /src: the job's user owns it
            uid, _, gid = ctx.settings.container_user.partition(":")
            os.chown(src, int(uid), int(gid or uid))
        return _Spare(spare_key(ctx), self._create(ctx, src, SPARE, helper), src)

    def run_command(self, ctx: JobContext, command: str, sink: LogSink) -> int:
        """Exec the command and relay its output frames as they come. The command ends when its
        own process does, even if a background child it left behind still holds the output open."""
        if self.memory_over is not None:  # killed over its GPU memory share between two commands
            return 137
        self.commands_run += 1
        last = self.commands_run == len(ctx.commands) and ctx.repeat_timing <= 1 and ctx.timed is None
        # the last command's exec goes on to copy /build (one exec less; rai-pty runs it)
        then = None
        if last and self.helper is not None and hands_over(self.helper):
            then = COLLECT_AFTER_HELPER if self.ends_job else COLLECT_AFTER
        return self._run_exec(ctx, [*self.wrap, "/bin/sh", "-c", command], self.user, sink, then=then)

    def explain_kill(self, code: int, ctx: JobContext) -> str | None:
        if self.memory_over is not None:
            return self.memory_over
        if code != 137 or self.container is None:
            return None
        for _ in range(10):  # the engine notices a dead init a moment after the exec ends
            try:
                self.container.reload()
                if self.container.status != "running":
                    return "the job's container stopped: its first process (PID 1) was killed"
            except DockerException:
                break
            time.sleep(0.1)
        gib = ctx.memory_mb / 1024
        kills = self._oom_kills()
        if kills:
            return f"killed: out of memory (limit {gib:g} GiB)"
        if kills is None:
            return f"killed by signal 9 (out of memory? the limit is {gib:g} GiB)"
        return "killed by signal 9"

    def kill(self) -> None:
        """Kill every process of the job but keep the container (and its /build) for collection;
        if even that cannot run (a fork bomb took every pid), kill the container."""
        if self.container is None:
            return
        try:
            res = self.container.exec_run(["/bin/sh", "-c", KILL_JOB], user=self.user)
            if res.exit_code == 0:
                return
        except DockerException:
            pass
        with contextlib.suppress(DockerException):
            self.container.kill()

    def collect_build(self, ctx: JobContext, cancel: threading.Event | None = None) -> Outcome | None:
        """Stop the job's processes and copy /build out (``collect.collect_build``), within the
        job's wall clock, its cancel and RAI_BUILD_MB / RAI_BUILD_FILES."""
        if self.container is None:
            return None
        handover, self.handover = self.handover, None
        argv = ending_job(self.ends_job, TAR_BUILD, COLLECT)
        outcome, contained = collect_build(self.client.api, self.container, self.user, ctx, cancel or threading.Event(), handover, argv)
        if contained is not None:
            self.contained = contained
        return outcome

    def cleanup(self) -> None:
        """Nothing of the job may outlive it on the GPU: unless collect_build proved every process
        of the job gone, kill the container now. Removing it waits for tidy()."""
        if self.memory_watch is not None:
            self.memory_watch.stop()
        if self.handover is not None:  # the copy was never read (the run broke off): the exec goes with the container
            self.handover.close()
            self.handover = None
        container, self.container = self.container, None
        if container is None:
            return
        if not self.contained:
            with contextlib.suppress(DockerException):
                container.kill()
        self.leftover = container
        if self.slot_src is not None:  # the job's files leave the slot's folder at once
            _empty(self.slot_src)

    def tidy(self) -> None:
        """After the job's end is reported: remove its container, start the next one ahead of time;
        the engine connections the job left idle are closed."""
        # docker-py keeps a pool per URL (up to 25, each with its idle connection): a pool process
        # held 4 to 26 sockets to the engine by the jobs it had run, ~400 on a host of 16 slots.
        # Closed before the threads below start (a request that took a pool a moment before it was
        # closed fails: _remove_later tries again; a spare that fails is made by the next job), so a
        # process's descriptors are the same from one job to the next.
        try:
            self.remove_runs()  # a ranked job's run containers, before the engine connections close
        finally:
            self.client.api.close()
        container, self.leftover = self.leftover, None
        if container is None:
            return
        if self.spares and self.ctx is not None:
            ctx, helper = self.ctx, self.helper
            _slot.prepare(lambda: self._make_spare(ctx, helper), then=lambda: _remove_later(container))
        else:
            _remove_later(container)
