"""Runs a job in one Docker container: the commands are exec'd into it one after another.

The container has no network, drops every capability, cannot gain privileges, runs as a non-root
user, and sees the project read-only at /src and a writable /build. It is labelled with the job
id so a restarted worker can remove anything a crash left behind.
"""

from __future__ import annotations

import os
import threading

import docker
from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from docker.types import DeviceRequest, Mount, Ulimit

from raiclient.models import LogStream

from ..logsink import LogSink
from .base import Executor, JobContext

LABEL = "rai.job"
KEEPALIVE = ["/bin/sh", "-c", "exec sleep 2147483647"]


class ExecutorUnavailable(RuntimeError):
    pass


def docker_client() -> docker.DockerClient:
    try:
        client = docker.from_env(timeout=60)
        client.ping()
        return client
    except DockerException as exc:
        raise ExecutorUnavailable(f"no Docker engine answers ({exc.__class__.__name__}); start dockerd or set RAI_EXECUTOR=process") from None


def reap_containers(client: docker.DockerClient, worker: str) -> int:
    """Remove containers a previous run of this worker left (crash, kill -9)."""
    n = 0
    for c in client.containers.list(all=True, filters={"label": [f"rai.worker={worker}"]}):
        try:
            c.remove(force=True)
            n += 1
        except NotFound:
            pass
    return n


class DockerExecutor(Executor):
    name = "docker"

    def __init__(self, client: docker.DockerClient | None = None):
        self.client = client or docker_client()
        self.container = None

    def start(self, ctx: JobContext, sink: LogSink) -> str:
        s = ctx.settings
        try:
            self.client.images.get(ctx.image)
        except ImageNotFound:
            raise ExecutorUnavailable(f"image {ctx.image} is not on worker {s.worker_name}; the operator must load it") from None
        mem = f"{ctx.memory_mb}m"
        kwargs: dict = dict(
            command=KEEPALIVE,
            detach=True,
            init=True,
            network_mode="none",
            user=s.container_user,
            working_dir="/build",
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            mem_limit=mem,
            memswap_limit=mem,
            pids_limit=s.pids,
            nano_cpus=int(min(s.cpus, os.cpu_count() or 1) * 1e9),
            ulimits=[Ulimit(name="core", soft=0, hard=0), Ulimit(name="nofile", soft=s.nofile, hard=s.nofile)],
            mounts=[
                Mount("/src", str(ctx.src_dir), type="bind", read_only=True),
                Mount("/build", str(ctx.build_dir), type="bind", read_only=False),
            ],
            tmpfs={"/tmp": f"rw,exec,nosuid,nodev,size={s.tmp_mb}m"},
            read_only=s.read_only_root,
            labels={LABEL: ctx.job_id, "rai.worker": s.worker_name},
            environment={**s.job_env_dict, "RAI_JOB_ID": ctx.job_id, "HOME": "/build"},
            name=f"rai-{ctx.job_id}-{s.worker_name}".lower()[:120],
        )
        if ctx.gpu_ids:
            kwargs["device_requests"] = [DeviceRequest(device_ids=ctx.gpu_ids, capabilities=[["gpu"]])]
        self.container = self.client.containers.run(ctx.image, **kwargs)
        gpu = f", GPU {','.join(ctx.gpu_ids)}" if ctx.gpu_ids else ""
        return f"Worker {s.worker_name} started the container (image {ctx.image}{gpu})"

    def run_command(self, ctx: JobContext, command: str, sink: LogSink) -> int:
        api = self.client.api
        try:
            exec_id = api.exec_create(self.container.id, ["/bin/sh", "-c", command], workdir="/build", user=ctx.settings.container_user)["Id"]
            for out, err in api.exec_start(exec_id, stream=True, demux=True):
                if out:
                    sink.feed(LogStream.out, out)
                if err:
                    sink.feed(LogStream.err, err)
            code = api.exec_inspect(exec_id)["ExitCode"]
        except (APIError, NotFound):
            return 137  # the container was killed under us (timeout, cancel)
        return 137 if code is None else int(code)

    def explain_kill(self, code: int, ctx: JobContext) -> str | None:
        if code != 137 or self.container is None:
            return None
        try:
            self.container.reload()
            oom = self.container.attrs["State"].get("OOMKilled")
        except DockerException:
            oom = False
        gib = ctx.memory_mb / 1024
        if oom:
            return f"killed: out of memory (limit {gib:g} GiB)"
        return f"killed by signal 9 (out of memory? the limit is {gib:g} GiB)"

    def kill(self) -> None:
        if self.container is not None:
            try:
                self.container.kill()
            except DockerException:
                pass

    def cleanup(self) -> None:
        """Kill now (nothing of the job may outlive it on the GPU), remove in the background so
        the job's end is reported without waiting; a restarted worker removes any leftover."""
        container, self.container = self.container, None
        if container is None:
            return
        try:
            container.kill()
        except DockerException:
            pass

        def remove() -> None:
            try:
                container.remove(force=True)
            except DockerException:
                pass

        threading.Thread(target=remove, name=f"remove-{container.short_id}", daemon=True).start()
