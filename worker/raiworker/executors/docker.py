"""Runs a job in one Docker container: the commands are exec'd into it one after another.

The container has no network, drops every capability, cannot gain privileges, runs as a non-root
user, and sees the project read-only at /src and a writable /build. It is labelled with the job
id so a restarted worker can remove anything a crash left behind.

Starting a container is most of a short job's overhead, so once a job's end is reported its slot
(the worker process that ran it) starts the next container ahead of time, for the same image, GPUs and
memory limit: a fresh container per job, made after the previous one was killed, never reused.
Its /src is the slot's own folder, empty until the next job's files are moved in. A job that
needs anything else gets a container of its own as before, and the spare one is removed.
"""

from __future__ import annotations

import io
import logging
import os
import shlex
import shutil
import socket
import tarfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from docker.types import Mount, Ulimit
from docker.utils.socket import STDOUT, frames_iter

from raiprotocol.archive import OverLimit, safe_extract
from raiprotocol.markers import repeat_line, running_line
from raiprotocol.models import JobState, MeasuredRun, TimedRun

from .. import gpu_access
from ..config import WorkerSettings
from ..errors import ExecutorUnavailable
from ..images import is_offered
from ..logsink import LogSink
from ..nvml import GpuWatch, Nvml, profiled_pids, unprofiled
from ..terminal import IN_CONTAINER, TIMED_IN_CONTAINER, Frames, no_terminal_note, pty_helper, terminal_env, timed_helper
from ..workdir import slot_dir
from .base import Executor, JobContext, Outcome

log = logging.getLogger("raiworker")

LABEL = "rai.job"
SPARE = "spare"  # the rai.job label of a container started ahead of time, before it has a job
KEEPALIVE = ["/bin/sh", "-c", "exec sleep 2147483647"]
# Kill every process of the job but init and the keepalive (init's first child), from inside, as the
# job's user: the container and its /build tmpfs survive for collection. A few passes catch forks.
KILL_JOB = (
    "keep=$(cut -d' ' -f1 /proc/1/task/1/children 2>/dev/null); "
    "for pass in 1 2 3; do for d in /proc/[0-9]*; do p=${d#/proc/}; "
    '[ "$p" -gt 1 ] && [ "$p" != "$keep" ] && [ "$p" != "$$" ] && kill -9 "$p" 2>/dev/null; done; done; true'
)
# At the job's end, one exec (each costs ~50 ms): kill the job's processes as above, prove none is
# left (one not yet reaped is a zombie, state Z after the last ') ' of its stat line, and runs
# nothing), then stream /build as a tar. Exit status LEFT_OVER says a process survived: the
# container is then killed before the job's end is reported; otherwise it is removed afterwards,
# when nobody waits for it.
LEFT_OVER = 99
FROZE_NOT = 70  # rai-timed: a process of the job kept running after the timed command ended
THROTTLE_RETRIES = 2  # a timed run during which the GPU slowed itself down is run again, this many times at most
COLLECT = (
    KILL_JOB.removesuffix("; true") + "; left=1; n=0; while [ $left = 1 ] && [ $n -lt 40 ]; do left=0; "
    'for d in /proc/[0-9]*; do p=${d#/proc/}; [ "$p" -gt 1 ] && [ "$p" != "$keep" ] && [ "$p" != "$$" ] && '
    'read -r st < "$d/stat" 2>/dev/null && case "${st##*) }" in Z*) ;; *) left=1; kill -9 "$p" 2>/dev/null ;; esac; done; '
    '[ $left = 1 ] && sleep 0.05; n=$((n+1)); done; '  # SIGKILL lands when the process next runs: wait up to 2 s
    f'tar -C /build -cf - .; t=$?; [ "$left" = 1 ] && exit {LEFT_OVER}; exit $t'
)
# Between a ranked job's timed runs: every process of the job ended (as at the end), nothing copied
END_PROCESSES = COLLECT.rsplit("tar -C", 1)[0] + f'[ "$left" = 1 ] && exit {LEFT_OVER}; exit 0'
# Issue 32: a ranked run's timed runs each start in a fresh container from the build's result: the
# build's processes end, the files the course keeps are copied out (bounded like /build), and each
# timed container copies them into its own empty /build from a read-only folder
KEPT_IN_CONTAINER = "/opt/rai/kept"
KEEP_OUT = END_PROCESSES.rsplit('[ "$left" = 1 ]', 1)[0] + f'[ "$left" = 1 ] && exit {LEFT_OVER}; tar -C /build -cf - -- "$@"'
KEEP_IN = f"cp -a {KEPT_IN_CONTAINER}/. /build/"
# the capabilities rai-timed needs (as root in the timed container: become the job's user, stop its
# processes); the job's own processes run as its user, with none and no way to gain one
TIMED_CAPS = ["KILL", "SETUID", "SETGID"]
# What the service reads of a timed run, bounded: the predictions (a regular file, not a link)
# and the profiler's CSV export
READ_LIMIT = 1024 * 1024
READ_PREDICTIONS = 'f="$1"; [ -f "$f" ] && [ ! -L "$f" ] || exit 3; head -c {limit} -- "$f"'
# ncu in two parts (issue 23): the launcher runs the course's command as the job's user and waits;
# root attaches from another exec and writes the report into a folder only root can enter, made
# under a name nobody can guess before the job's code could run: no process of the job can touch
# the report, before, during or after the run
NCU_LAUNCH = "exec ncu --mode launch --target-processes all -- /bin/sh -c {command}"
# (root works in that folder, its HOME too: ncu reads its settings from both, and in /build, the job's
# user's, root without capabilities may not even look). The folder is a tmpfs of root's, mode 0700,
# mounted when the timed run's container is made: it exists before any process of the job does, so
# no job process can make it first, look into it or guess at it (issue 34)
MEASURE_DIR = "/opt/rai/measure"
NCU_ATTACH = ("cd {dir} && export HOME={dir} && "
              "exec ncu --mode attach --hostname 127.0.0.1 --metrics gpu__time_duration.sum --export {dir}/run{r} --force-overwrite")
NCU_EXPORT = ("cd {dir} && HOME={dir} ncu --import {dir}/run{r}.ncu-rep --csv --page raw --metrics gpu__time_duration.sum 2>/dev/null "
              "| head -c {limit}")


def docker_client() -> docker.DockerClient:
    try:
        client = docker.from_env(timeout=60)
        client.ping()
        return client
    except DockerException as exc:
        raise ExecutorUnavailable(f"no Docker engine answers ({exc.__class__.__name__}); start dockerd or set RAI_EXECUTOR=process") from None


_shared: dict[int, docker.DockerClient] = {}  # per process: a client's sockets must not cross a fork
_shared_lock = threading.Lock()


def shared_client() -> docker.DockerClient:
    """This process's one Docker client, for every job it runs (a client per job, never closed,
    held its sockets to the engine for ever: a worker's descriptors grew with every job)."""
    with _shared_lock:
        client = _shared.get(os.getpid())
        if client is None:
            client = _shared[os.getpid()] = docker_client()
        return client


def reap_containers(client: docker.DockerClient, worker: str, spares_only: bool = False) -> int:
    """Remove containers a previous run of this worker left (crash, kill -9), or at its end the
    spare containers its slots had started ahead of time."""
    n = 0
    labels = [f"rai.worker={worker}", *([f"{LABEL}={SPARE}"] if spares_only else [])]
    for c in client.containers.list(all=True, filters={"label": labels}):
        try:
            c.remove(force=True)
            n += 1
        except NotFound:
            pass
    return n


def _runtimes(client: docker.DockerClient) -> dict[str, Any]:
    try:
        return dict(client.info().get("Runtimes") or {})
    except DockerException:
        return {}


def container_name(job_id: str, worker: str) -> str:
    """A job's container on a worker, by name (a spare is renamed so when a job takes it; labels
    cannot change): how a lost run's container is found."""
    return f"rai-{job_id}-{worker}".lower()[:120]


SpareKey = tuple[str, tuple[str, ...], int]  # image, GPU ids, memory limit


def spare_key(ctx: JobContext) -> SpareKey:
    """What a container is made for: a spare serves only a job that needs the same."""
    return ctx.image, tuple(ctx.gpu_ids), ctx.memory_mb


@dataclass(frozen=True)
class _Spare:
    """A container started ahead of time for this slot's next job, and what it was made for."""

    key: SpareKey
    container: Any
    src: Path  # the slot's folder, bound read-only at /src


class _Slot:
    """This process's spare container (a Celery pool process runs one job at a time)."""

    def __init__(self) -> None:
        self.spare: _Spare | None = None
        self.making: threading.Thread | None = None

    def take(self, key: SpareKey) -> _Spare | None:
        """The spare if it was made for this job and still runs; any other is removed."""
        if self.making is not None:
            self.making.join(60)
            self.making = None
        spare, self.spare = self.spare, None
        if spare is None:
            return None
        try:
            spare.container.reload()
            if spare.key == key and spare.container.status == "running":
                return spare
        except DockerException:
            pass
        _remove_later(spare.container)
        return None

    def prepare(self, make: Callable[[], _Spare]) -> None:
        def run() -> None:
            try:
                self.spare = make()
            except Exception:  # noqa: BLE001 - no spare: the next job starts its own container
                self.spare = None

        self.making = threading.Thread(target=run, name="spare-container", daemon=True)
        self.making.start()


_slot = _Slot()


def _exit_code(api: Any, exec_id: str) -> int | None:
    """An exec's exit status; Docker may record it a moment after its output ends."""
    for _ in range(50):
        info = api.exec_inspect(exec_id)
        if not info.get("Running") and info.get("ExitCode") is not None:
            return info["ExitCode"]
        time.sleep(0.02)
    return None


def _close(conn: Any) -> None:
    """Close an exec's attached socket (the SDK's wrapper and the socket beneath it)."""
    for thing in (getattr(conn, "_sock", None), conn):
        try:
            if thing is not None:
                thing.close()
        except OSError:
            pass


def _remove_later(container: Any) -> None:
    def remove() -> None:
        try:
            container.remove(force=True)
        except DockerException:
            pass

    threading.Thread(target=remove, name=f"remove-{container.short_id}", daemon=True).start()


def _move_entries(src: Path, dest: Path) -> bool:
    """Move the project's top-level entries (renames: links are moved, never followed); on
    failure (another file system) put them back and say so."""
    moved: list[str] = []
    try:
        for entry in src.iterdir():
            entry.rename(dest / entry.name)
            moved.append(entry.name)
        return True
    except OSError:
        for name in moved:
            (dest / name).rename(src / name)
        return False


def _empty(folder: Path) -> bool:
    """Remove everything in the folder (links are removed, never followed); True if it is empty."""
    for entry in folder.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
    return not any(folder.iterdir())




class DockerExecutor(Executor):
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
    def stop_orphan(cls, settings: WorkerSettings, job_id: str) -> bool:
        """The run's process is paused or stuck: its container goes (its command would go on)."""
        try:
            shared_client().api.remove_container(container_name(job_id, settings.worker_name), force=True)
            return True
        except NotFound:
            return False
        except (DockerException, ExecutorUnavailable) as exc:
            log.warning("job %s: the container of a run that stopped renewing its lease was not removed: %s", job_id, exc)
            return False

    def __init__(self, client: docker.DockerClient | None = None, spares: bool = True):
        self.client = client or shared_client()
        self.container: Any = None  # the job's docker Container once started (the Docker SDK is untyped)
        self.user = "1000:1000"
        self.wrap: list[str] = []  # the pty helper inside the container, when there is one
        self.spares = spares
        self.slot_src: Path | None = None  # the job's files were moved here (a spare container)
        self.helper: Path | None = None
        self.ctx: JobContext | None = None  # the job started: its slot's next container is made like it
        self.contained = False  # collect_build saw every process of the job gone
        self.leftover: Any = None  # the job's container, for tidy() to remove
        self.measure_dir: str | None = None  # root's folder for a ranked job's profiler reports
        self.kept: Path | None = None  # what of the build each timed run starts from (issue 32)
        self.attach_said = ""  # what root's ncu said last, for the job's log when it cannot attach

    def start(self, ctx: JobContext, sink: LogSink) -> str:
        s = ctx.settings
        self.ctx = ctx
        self.helper = helper = pty_helper(s.work_dir, s.pty_helper)
        if helper is None:
            sink.system(no_terminal_note())
        else:
            self.wrap = [IN_CONTAINER]
        self.user = s.container_user
        gpu = f", GPU {','.join(ctx.gpu_ids)}" if ctx.gpu_ids else ""
        lost = self._stop_lost_run(ctx)
        if lost:
            sink.system(f"Stopped the container of an earlier run of this job on {s.worker_name} (its process was lost)")
        spare = _slot.take(spare_key(ctx)) if self.spares else None
        if spare is not None and _move_entries(ctx.src_dir, spare.src):  # the slot's folder was empty: this job's files only
            self.container, self.slot_src = spare.container, spare.src
            try:  # from now on the container is known by its job, as one made for it is
                spare.container.rename(container_name(ctx.job_id, s.worker_name))
            except DockerException:
                pass
            return f"Worker {s.worker_name} started the container ahead of time (image {ctx.image}{gpu})"
        if spare is not None:
            _remove_later(spare.container)
        try:
            image = self.client.images.get(ctx.image)
        except ImageNotFound:
            raise ExecutorUnavailable(f"image {ctx.image} is not on worker {s.worker_name}; the operator must load it") from None
        if not is_offered(image, s):  # by its id: a label (inherited by images built FROM it) grants nothing
            raise ExecutorUnavailable(f"image {ctx.image} is not offered to jobs on worker {s.worker_name}: only images its "
                                      "operator published are (raiworker publish, RAI_WORKER_IMAGES, or pulled through rai)")
        self.container = self._create(ctx, ctx.src_dir, ctx.job_id, helper)
        return f"Worker {s.worker_name} started the container (image {ctx.image}{gpu})"

    def _create(self, ctx: JobContext, src: Path, job: str, helper: Path | None, timed: tuple[Path, Path, int] | None = None) -> Any:
        """The job's container; ``timed`` (rai-timed, the kept files, the run's number): a timed
        run's fresh one (issue 32). Its init and keepalive run as root, out of the job's reach
        (the job's user cannot signal, trace or replace them); every command runs as the job's user."""
        s = ctx.settings
        mounts = [Mount("/src", str(src), type="bind", read_only=True)]
        if helper is not None:
            mounts.append(Mount(IN_CONTAINER, str(helper), type="bind", read_only=True))
        if timed is not None:
            mounts += [Mount(TIMED_IN_CONTAINER, str(timed[0]), type="bind", read_only=True),
                       Mount(KEPT_IN_CONTAINER, str(timed[1]), type="bind", read_only=True)]
        mem = f"{ctx.memory_mb}m"
        uid, _, gid = s.container_user.partition(":")
        gid = gid or uid
        kwargs: dict = dict(
            command=KEEPALIVE,
            detach=True,
            init=True,
            network_mode="none",
            user="0:0",
            working_dir="/build",
            cap_drop=["ALL"],
            cap_add=TIMED_CAPS if timed is not None else None,
            security_opt=["no-new-privileges"],
            mem_limit=mem,
            memswap_limit=mem,
            pids_limit=s.pids,
            nano_cpus=int(min(s.cpus, os.cpu_count() or 1) * 1e9),
            ulimits=[Ulimit(name="core", soft=0, hard=0), Ulimit(name="nofile", soft=s.nofile, hard=s.nofile)],
            mounts=mounts,
            tmpfs={
                "/tmp": f"rw,exec,nosuid,nodev,size={s.tmp_mb}m,mode=1777",
                "/build": f"rw,exec,nosuid,nodev,size={s.build_mb}m,uid={uid},gid={gid},mode=0755",
                **({MEASURE_DIR: "rw,noexec,nosuid,nodev,size=512m,mode=0700"} if timed is not None else {}),
            },
            read_only=s.read_only_root,
            labels={LABEL: job, "rai.worker": s.worker_name},
            environment={**s.job_env, **terminal_env(s.columns), "HOME": "/build"},  # RAI_JOB_ID: with each exec
            name=(container_name(job, s.worker_name) + (f"-t{timed[2]}" if timed else "")) if job != SPARE else None,
        )
        if ctx.gpu_ids:  # exactly its GPUs, the way this worker found at start (gpu_access)
            gpu = gpu_access.current(s, [int(i) for i in ctx.gpu_ids], lambda: _runtimes(self.client)).container_options(
                ctx.gpu_ids, self.client.images.get(ctx.image).attrs.get("Config", {}).get("Env") or [])
            kwargs["mounts"] = kwargs["mounts"] + gpu.pop("mounts", [])
            kwargs["environment"] = {**kwargs["environment"], **gpu.pop("environment", {})}
            kwargs.update(gpu)
        return self.client.containers.run(ctx.image, **kwargs)

    def _stop_lost_run(self, ctx: JobContext) -> bool:
        """A run of this job whose pool process died (kill -9) left its container running its
        command, unseen: remove it before the job runs again. Returns whether there was one."""
        try:
            self.client.api.remove_container(container_name(ctx.job_id, ctx.settings.worker_name), force=True)
        except NotFound:
            return False
        except DockerException as exc:
            raise ExecutorUnavailable(f"the container of a lost earlier run of job {ctx.job_id} could not be removed: {exc}") from None
        return True

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
        return self._run_exec(ctx, [*self.wrap, "/bin/sh", "-c", command], self.user, sink)

    def _run_exec(self, ctx: JobContext, argv: list[str], user: str, sink: LogSink, env: dict[str, str] | None = None) -> int:
        api = self.client.api
        try:
            exec_id = api.exec_create(self.container.id, argv, workdir="/build", user=user,
                                      environment={"RAI_JOB_ID": ctx.job_id, **(env or {})})["Id"]
            conn = api.exec_start(exec_id, socket=True)
        except (APIError, NotFound):
            return 137  # the container is gone (killed under us)
        raw = getattr(conn, "_sock", conn)
        raw.settimeout(0.5)
        frames = Frames(sink)
        try:
            while True:
                try:
                    data = raw.recv(65536)
                except socket.timeout:
                    if not self._running(exec_id):
                        frames.drain(raw)
                        break
                    continue
                except OSError:
                    break
                if not data:
                    break
                frames.feed(data)
        finally:
            conn.close()
        # The engine may close the output stream a moment before it records the exit status (a
        # busy host widens that moment): wait for it rather than report a code the job never had.
        waited = 0
        while True:
            try:
                info = api.exec_inspect(exec_id)
            except NotFound:
                return 137  # the container is gone (killed under us)
            except (APIError, DockerException):
                info = {"Running": True, "ExitCode": None}
            if not info.get("Running") and info.get("ExitCode") is not None:
                return int(info["ExitCode"])
            waited += 1
            if waited % 10 == 0 and not self._container_running():
                return 137  # the whole container stopped: its execs never report a status
            if waited > 300:  # 15 s
                return 137
            time.sleep(0.05)

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
            self.container = self._create(ctx, ctx.src_dir if self.slot_src is None else self.slot_src, ctx.job_id, self.helper,
                                          timed=(helper, self.kept, r) if self.kept is not None else None)
            return self._measure_in(ctx, r, timed, sink)
        except DockerException as exc:
            return MeasuredRun(exit_code=-1, wall_seconds=0.0, problem=f"the timed run's container could not start: {str(exc)[:200]}")
        finally:
            timed_container, self.container = self.container, build_container
            if timed_container is not build_container and timed_container is not None:
                try:
                    timed_container.remove(force=True)
                except DockerException:
                    pass

    def _keep_build(self, ctx: JobContext, timed: TimedRun) -> str | None:
        """Once, before the first timed run: end every process of the build, and copy out of its
        /build what the timed runs start from (all of it, or the files the course keeps)."""
        dest = ctx.build_dir.parent / "kept"
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        s, api = ctx.settings, self.client.api
        try:
            exec_id = api.exec_create(self.container.id, ["/bin/sh", "-c", KEEP_OUT, "sh", *(timed.keep or ["."])], user=self.user)["Id"]
            conn = api.exec_start(exec_id, socket=True)
            try:
                chunks = (data for stream, data in frames_iter(conn, tty=False) if stream == STDOUT)
                budget = _Budget(chunks, s.build_mb * 1024**2 + s.build_files * 1024 + 1024**2)
                with tarfile.open(fileobj=_IterReader(budget), mode="r|") as tar:
                    safe_extract(tar, dest, max_bytes=s.build_mb * 1024**2, max_entries=s.build_files)
                for _ in budget:
                    pass
            finally:
                _close(conn)
            code = _exit_code(api, exec_id)
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
            return MeasuredRun(exit_code=-1, wall_seconds=0.0, problem=f"the build's result could not be put in place ({out[-200:].decode('utf-8', 'replace')})")
        uid, _, gid = self.user.partition(":")
        cpu_file = f"{MEASURE_DIR}/cpu{r}"  # rai-timed writes the run's CPU time there (root's folder)
        freeze = [TIMED_IN_CONTAINER, uid, gid or uid, cpu_file, *self.wrap, "/bin/sh", "-c"]
        self.measure_dir = MEASURE_DIR
        seed = {"RAI_SEED": str(timed.seeds[r - 1])} if timed.seeds and r <= len(timed.seeds) else None
        watch = None
        if timed.measure == "kernels" and ctx.gpu_ids:  # who uses the GPU, and how it runs (issue 32)
            lib = Nvml.open()
            if lib is not None:
                watch = GpuWatch(lib, [int(i) for i in ctx.gpu_ids], self.container.id, int(uid)).start()
        if timed.measure == "kernels":
            sink.system(running_line(f"ncu (rai's timed run {r} of {timed.repeats}) {timed.command}"))
            attached: list[int] = []
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
        if watch is not None:
            watch.stop()  # the job is frozen: its processes still hold their GPU contexts
        gpu = {"before": watch.states[0], "after": watch.states[-1]} if watch is not None else None
        status, out = self._exec_as("0:0", f"cat {cpu_file}")
        try:
            cpu: float | None = float(out) if status == 0 else None
        except ValueError:
            cpu = None
        if code == FROZE_NOT:
            return MeasuredRun(exit_code=code, wall_seconds=wall, cpu_seconds=cpu,
                               problem="a process of the job kept running after the end of its timed run")
        status, out = self._exec_as(self.user, READ_PREDICTIONS.format(limit=READ_LIMIT), timed.predictions)
        predictions = out.decode("utf-8", "replace") if status == 0 else None
        report = None
        if timed.measure == "kernels":
            if not attached or attached[-1] != 0:  # the last try decides: the first may come before the launcher listens
                return MeasuredRun(exit_code=code, wall_seconds=wall, predictions=predictions, cpu_seconds=cpu,
                                   problem=f"the profiler could not attach to the timed run (ncu status "
                                           f"{attached[-1] if attached else 'none'}: {self.attach_said.strip()})")
            status, out = self._exec_as("0:0", NCU_EXPORT.format(dir=self.measure_dir, r=r, limit=READ_LIMIT))
            report = out.decode("utf-8", "replace")
            profiled = profiled_pids(report)
            # a run with no kernel in the report is told so by the server ("launched no GPU kernel"),
            # not taken for hidden work: a process that only allocated memory is in no report
            hidden = unprofiled(watch.users, profiled) if watch is not None and profiled else []
            if hidden:
                return MeasuredRun(exit_code=code, wall_seconds=round(wall, 6), predictions=predictions, cpu_seconds=cpu, gpu=gpu,
                                   problem=f"a process used the GPU outside the measurement (pid {', '.join(map(str, hidden))} "
                                           "in the container, not in the profiler's report)")
        return MeasuredRun(exit_code=code, wall_seconds=round(wall, 6), report=report, predictions=predictions, cpu_seconds=cpu,
                           gpu=gpu)

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

    def _exec_as(self, user: str, script: str, *args: str) -> tuple[int, bytes]:
        """A short exec of rai's own (not the job's command): its status and its output."""
        try:
            res = self.container.exec_run(["/bin/sh", "-c", script, "sh", *args], user=user, workdir="/build", demux=False)
        except DockerException as exc:
            return 126, str(exc).encode()
        return (res.exit_code if res.exit_code is not None else 126), res.output or b""

    def _container_running(self) -> bool:
        try:
            self.container.reload()
            return self.container.status == "running"
        except NotFound:
            return False
        except DockerException:
            return True

    def _running(self, exec_id: str) -> bool:
        """Whether the exec still runs; a failing API call (a busy engine) counts as yes."""
        try:
            return bool(self.client.api.exec_inspect(exec_id)["Running"])
        except NotFound:
            return False
        except (APIError, DockerException):
            return True

    def _oom_kills(self) -> int | None:
        """The container cgroup's OOM-kill count (cgroup v1 or v2), when the host's cgroups are visible."""
        cid = self.container.id
        for path in (f"/sys/fs/cgroup/memory/docker/{cid}/memory.oom_control",
                     f"/sys/fs/cgroup/system.slice/docker-{cid}.scope/memory.events",
                     f"/sys/fs/cgroup/docker/{cid}/memory.events"):
            try:
                with open(path) as fh:
                    for line in fh:
                        key, _, value = line.partition(" ")
                        if key == "oom_kill":
                            return int(value)
            except OSError:
                continue
        return None

    def explain_kill(self, code: int, ctx: JobContext) -> str | None:
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
        try:
            self.container.kill()
        except DockerException:
            pass

    def collect_build(self, ctx: JobContext, cancel: threading.Event | None = None) -> Outcome | None:
        """Stop the job's processes and copy /build (a tmpfs: it dies with the container, and
        `docker cp` cannot read it) out through the image's own tar into the host folder with
        ``safe_extract``: the job controls that stream, so nothing in it may write outside the
        folder (links out of the tree, entries through links, devices and the like are left behind).
        The copy is bounded like the commands: the wall clock, the cancel, and RAI_BUILD_MB and
        RAI_BUILD_FILES (a 1 TiB sparse file or 300,000 small files once held a slot for hours)."""
        if self.container is None:
            return None
        s, api = ctx.settings, self.client.api
        stop, why, cancel = threading.Event(), [], cancel or threading.Event()
        deadline = min(ctx.wall_deadline, time.monotonic() + s.collect_seconds)

        def guard() -> None:  # ends the copy by killing the container: the stream then ends
            while not stop.wait(0.1):
                if cancel.is_set() or time.monotonic() > deadline:
                    why.append("cancel" if cancel.is_set() else "wall" if time.monotonic() > ctx.wall_deadline else "time")
                    try:
                        self.container.kill()
                    except DockerException:
                        pass
                    return

        watcher = threading.Thread(target=guard, name=f"collect-{ctx.job_id}", daemon=True)
        watcher.start()
        problem: str | None = None
        try:
            exec_id = api.exec_create(self.container.id, ["/bin/sh", "-c", COLLECT], user=self.user)["Id"]
            # a socket of our own: closed on a cut, so the engine stops copying at once (with the
            # stream left open, killing the container waited 10 s for it)
            conn = api.exec_start(exec_id, socket=True)
            try:
                chunks = (data for stream, data in frames_iter(conn, tty=False) if stream == STDOUT)
                # headers and padding (1 KiB an entry at most) ride on top of the files themselves
                budget = _Budget(chunks, s.build_mb * 1024**2 + s.build_files * 1024 + 1024**2)
                with tarfile.open(fileobj=_IterReader(budget), mode="r|") as tar:
                    safe_extract(tar, ctx.build_dir, max_bytes=s.build_mb * 1024**2, max_entries=s.build_files)
                for _ in budget:  # the exec's end (tar's last padding), so its exit status is known
                    pass
            finally:
                _close(conn)
            code = _exit_code(api, exec_id)
            self.contained = code not in (None, LEFT_OVER)
            if code not in (0, LEFT_OVER) and not why:
                problem = f"the copy ended with status {code}"
        except OverLimit as exc:
            return Outcome(JobState.failed, message=f"the build folder was cut: it holds {exc} (RAI_BUILD_FILES / RAI_BUILD_MB); "
                                                    "what was copied until then is kept")
        except (DockerException, tarfile.TarError, OSError) as exc:
            problem = f"{exc.__class__.__name__}: {str(exc)[:200]}"
        finally:
            stop.set()
            watcher.join(timeout=5)
        if why == ["cancel"]:
            return Outcome(JobState.cancelled, message="cancelled while the build folder was being copied")
        if why == ["wall"]:
            return Outcome(JobState.timed_out, message=f"timed out: the build folder was being copied when the job hit its "
                                                       f"wall-time limit of {ctx.wall_seconds} s; it is incomplete")
        if why == ["time"]:
            return Outcome(JobState.failed, message=f"the build folder was cut: copying it took more than {s.collect_seconds} s; "
                                                    "what was copied until then is kept")
        if problem is not None:
            return Outcome(JobState.error, message=f"the build folder could not be copied completely ({problem}); "
                                                   "it is incomplete")
        return None

    def cleanup(self) -> None:
        """Nothing of the job may outlive it on the GPU: unless collect_build proved every process
        of the job gone, kill the container now. Removing it waits for tidy()."""
        container, self.container = self.container, None
        if container is None:
            return
        if not self.contained:
            try:
                container.kill()
            except DockerException:
                pass
        self.leftover = container
        if self.slot_src is not None:  # the job's files leave the slot's folder at once
            _empty(self.slot_src)

    def tidy(self) -> None:
        """After the job's end is reported: remove its container, start the next one ahead of time."""
        container, self.leftover = self.leftover, None
        if container is None:
            return
        _remove_later(container)
        if self.spares and self.ctx is not None:
            ctx, helper = self.ctx, self.helper
            _slot.prepare(lambda: self._make_spare(ctx, helper))


class _Budget:
    """The chunks of a stream, up to ``limit`` bytes in all: past it, OverLimit."""

    def __init__(self, chunks: Any, limit: int):
        self.chunks, self.limit, self.seen = iter(chunks), limit, 0

    def __iter__(self) -> _Budget:
        return self

    def __next__(self) -> bytes:
        chunk = next(self.chunks)
        self.seen += len(chunk)
        if self.seen > self.limit:
            raise OverLimit(f"more than {self.limit // 1024**2} MiB of files (sparse files count whole)")
        return chunk


class _IterReader(io.RawIOBase):
    """A file-like view of an iterator of byte chunks (the Docker archive stream)."""

    def __init__(self, chunks):
        self.chunks = iter(chunks)
        self.rest = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        while not self.rest:
            try:
                self.rest = next(self.chunks)
            except StopIteration:
                return 0
        n = min(len(buf), len(self.rest))
        buf[:n] = self.rest[:n]
        self.rest = self.rest[n:]
        return n
