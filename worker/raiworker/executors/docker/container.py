"""A job's container and the execs rai runs in it: the state one job's Docker run keeps, how its
containers are made (the job's, a spare one, a timed run's), and running a command in it.

The container has no network, drops every capability, cannot gain privileges, runs the job's
commands as a non-root user, and sees the project read-only at /src and a writable /build. It is
labelled with the job id so a restarted worker can remove anything a crash left behind.
"""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path
from typing import Any

import docker
from docker.errors import APIError, DockerException, NotFound
from docker.types import Mount, Ulimit

from ...gpu import access as gpu_access
from ...gpu.nvml import MemoryShare
from ...lease import LEASE_EXIT
from ...logsink import LogSink
from ...terminal import IN_CONTAINER, TIMED_IN_CONTAINER, Frames, gathered, terminal_env
from ...workdir import lease_stamp
from ..base import Executor, JobContext
from .cgroup import TimedCgroup
from .client import LABEL, SPARE, _runtimes, container_name, shared_client
from .collect import EndMarked, Handover
from .scripts import CGROUP_IN_CONTAINER, END_JOB_ENV, KEEPALIVE, KEPT_IN_CONTAINER, LEASE_IN_CONTAINER, MEASURE_DIR, TIMED_CAPS


class ContainerJob(Executor):
    """One job's Docker run, below what the executor does with it: its containers and execs."""

    def __init__(self, client: docker.DockerClient | None = None, spares: bool = True) -> None:
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
        self.kept: Path | None = None  # what of the build each timed run starts from (issue 32)
        self.memory_watch: MemoryShare | None = None  # a shared run's GPU memory share, watched
        self.memory_over: str | None = None  # why it was killed, once it held more than its share
        self.handover: Handover | None = None  # the last command's exec, copying /build on (COLLECT_AFTER)
        self.commands_run = 0
        self.ends_job = False  # the helper in the container ends the job's processes (scripts.ending_job)

    def _create(
        self,
        ctx: JobContext,
        src: Path,
        job: str,
        helper: Path | None,
        timed: tuple[Path, Path, str] | None = None,
        cgroup: TimedCgroup | None = None,
        masked: tuple[Path, list[str]] | None = None,
        quota: bool = True,
    ) -> Any:
        """The job's container; ``timed`` (rai-timed, the kept files, the run's name): a timed
        run's fresh one (issue 32), made under ``cgroup``'s parent, whose folder root's folder in
        it holds (issue 46); ``masked`` (an empty file, paths): files of the image that read as that empty
        file in it (C25: what the course forbids in timed runs). ``quota``: False for a timed run that the course's
        CPU budget bounds (it holds the host alone). Its init and keepalive run as root, out of the job's reach (the job's
        user cannot signal, trace or replace them); every command runs as the job's user."""
        s = ctx.settings
        stamps = lease_stamp(s.work_dir).parent  # the slot's, made before the container: a spare's too
        stamps.mkdir(parents=True, exist_ok=True)
        mounts = [
            Mount("/src", str(src), type="bind", read_only=True),
            Mount(LEASE_IN_CONTAINER, str(stamps), type="bind", read_only=True),
        ]
        if helper is not None:
            mounts.append(Mount(IN_CONTAINER, str(helper), type="bind", read_only=True))
        if timed is not None:
            mounts += [
                Mount(TIMED_IN_CONTAINER, str(timed[0]), type="bind", read_only=True),
                Mount(KEPT_IN_CONTAINER, str(timed[1]), type="bind", read_only=True),
            ]
        if masked is not None:
            mounts += [Mount(path, str(masked[0]), type="bind", read_only=True) for path in masked[1]]
        if cgroup is not None:
            mounts.append(Mount(CGROUP_IN_CONTAINER, str(cgroup.folder), type="bind", read_only=False))
        mem = f"{ctx.memory_mb}m"
        cpus = s.cpus if quota else s.timed_cpus  # a timed run under the course's CPU budget: WorkerSettings.timed_cpus
        uid, _, gid = s.container_user.partition(":")
        gid = gid or uid
        kwargs: dict[str, Any] = {
            "command": KEEPALIVE,
            "detach": True,
            "init": True,
            "network_mode": "none",
            "user": "0:0",
            "working_dir": "/build",
            "cap_drop": ["ALL"],
            "cap_add": TIMED_CAPS if timed is not None else None,
            "security_opt": ["no-new-privileges"],
            "mem_limit": mem,
            "memswap_limit": mem,
            "pids_limit": s.pids,
            "nano_cpus": int(min(cpus, os.cpu_count() or 1) * 1e9) if cpus else None,  # None: no CFS quota
            "ulimits": [Ulimit(name="core", soft=0, hard=0), Ulimit(name="nofile", soft=s.nofile, hard=s.nofile)],
            "mounts": mounts,
            "tmpfs": {
                "/tmp": f"rw,exec,nosuid,nodev,size={s.tmp_mb}m,mode=1777",
                "/build": f"rw,exec,nosuid,nodev,size={s.build_mb}m,uid={uid},gid={gid},mode=0755",
                **({MEASURE_DIR: "rw,noexec,nosuid,nodev,size=512m,mode=0700"} if timed is not None else {}),
            },
            "read_only": s.read_only_root,
            "labels": {LABEL: job, "rai.worker": s.worker_name},
            "environment": {**s.job_env, **terminal_env(s.columns), "HOME": "/build"},  # RAI_JOB_ID: with each exec
            "name": (container_name(job, s.worker_name) + (f"-{timed[2]}" if timed else "")) if job != SPARE else None,
        }
        if cgroup is not None:
            kwargs["cgroup_parent"] = cgroup.parent
        if ctx.gpu_ids:  # exactly its GPUs, the way this worker found at start (gpu.access)
            gpu = gpu_access.current(s, [int(i) for i in ctx.gpu_ids], lambda: _runtimes(self.client)).container_options(
                ctx.gpu_ids, self.client.images.get(ctx.image).attrs.get("Config", {}).get("Env") or []
            )
            kwargs["mounts"] = kwargs["mounts"] + gpu.pop("mounts", [])
            kwargs["environment"] = {**kwargs["environment"], **gpu.pop("environment", {})}
            kwargs.update(gpu)
        return self.client.containers.run(ctx.image, **kwargs)

    def _run_exec(
        self, ctx: JobContext, argv: list[str], user: str, sink: LogSink, env: dict[str, str] | None = None, then: str | None = None
    ) -> int:
        """Run ``argv`` (rai-pty and a command) to its end, its output to the log; returns its status.
        ``then``: rai-pty goes on to run this script in the same exec once the command has ended
        (COLLECT_AFTER); its stream is left to ``collect_build`` (``self.handover``)."""
        api = self.client.api
        token = secrets.token_hex(16) if then is not None else ""
        if then is not None:
            env = {**(env or {}), "RAI_PTY_THEN": then, "RAI_PTY_END": token, **(END_JOB_ENV if self.ends_job else {})}
        try:
            exec_id = api.exec_create(
                self.container.id, argv, workdir="/build", user=user, environment={"RAI_JOB_ID": ctx.job_id, **(env or {})}
            )["Id"]
            conn = api.exec_start(exec_id, socket=True)
        except (APIError, NotFound):
            return 137  # the container is gone (killed under us)
        raw = getattr(conn, "_sock", conn)
        raw.settimeout(0.5)
        frames = EndMarked(sink, token) if then is not None else Frames(sink)
        try:
            self._relay(raw, exec_id, frames)
            if isinstance(frames, EndMarked) and frames.code is not None:  # the copy goes on: collect_build reads it
                self.handover, conn = Handover(conn, raw, exec_id, frames), None
                return frames.code
        finally:
            if conn is not None:
                conn.close()
        if isinstance(frames, EndMarked):
            frames.flush_held()
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

    def _relay(self, raw: Any, exec_id: str, frames: Frames) -> None:
        """The exec's output to the log as it comes, to its end (or an EndMarked one's end line)."""
        while True:
            try:
                data = raw.recv(65536)
            except TimeoutError:
                if not self._running(exec_id):
                    frames.drain(raw)
                    return
                continue
            except OSError:
                return
            if not data:
                return
            data, ended = gathered(raw, data)
            frames.feed(data)
            if ended or (isinstance(frames, EndMarked) and frames.code is not None):
                return

    def _exec_as(self, user: str, script: str, *args: str, container: Any = None) -> tuple[int, bytes]:
        """A short exec of rai's own (not the job's command) in the job's container (or ``container``):
        its status and its output."""
        try:
            res = (container or self.container).exec_run(["/bin/sh", "-c", script, "sh", *args], user=user, workdir="/build", demux=False)
        except DockerException as exc:
            return 126, str(exc).encode()
        return (res.exit_code if res.exit_code is not None else 126), res.output or b""

    def lease_stopped(self, wait: float = 0.0) -> bool:
        """The job's container ended with its keepalive's LEASE_EXIT: the lease's watcher stopped it.
        ``wait``: one still running (its exec was cut off a moment ago) is given that long to end."""
        container = self.container if self.container is not None else self.leftover
        if container is None:
            return False
        for _ in range(max(1, int(wait * 10))):
            try:
                container.reload()
            except NotFound:  # removed under the run (tidy_host, a later attempt): a restart, never the command's failure
                return True
            except DockerException:  # the engine away: nothing says the lease stopped it
                return False
            state = container.attrs.get("State") or {}
            if not state.get("Running"):
                return bool(state.get("ExitCode") == LEASE_EXIT)
            if wait:
                time.sleep(0.1)
        return False

    def _container_running(self) -> bool:
        try:
            self.container.reload()
            return bool(self.container.status == "running")
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
        for path in (
            f"/sys/fs/cgroup/memory/docker/{cid}/memory.oom_control",
            f"/sys/fs/cgroup/system.slice/docker-{cid}.scope/memory.events",
            f"/sys/fs/cgroup/docker/{cid}/memory.events",
        ):
            try:
                with open(path) as fh:
                    for line in fh:
                        key, _, value = line.partition(" ")
                        if key == "oom_kill":
                            return int(value)
            except OSError:
                continue
        return None
