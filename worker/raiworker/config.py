"""Worker settings from the environment (``RAI_*``); limits are the operator's, per worker."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator
from pydantic_settings import NoDecode

from raiprotocol.settings import CommaList, SharedSettings

from .workdir import own_name


def _pairs(value: Any) -> Any:
    """ "KEY=VALUE,KEY2=VALUE2" as a dict."""
    if isinstance(value, str):
        pairs = (item.split("=", 1) for item in value.split(",") if "=" in item)
        return {k.strip(): v.strip() for k, v in pairs}
    return value


MAX_JOBS_PER_GPU = 16


def _per_queue(value: Any) -> Any:
    """ "4" (every queue) or "dev=4,gpu=2" (per queue; "*" for the rest) as {queue: jobs per GPU}."""
    if isinstance(value, int):
        return {"*": value}
    if isinstance(value, str):
        value = value.strip()
        if not value:
            return {}
        if "=" not in value:
            return {"*": value}
        return _pairs(value)
    return value


class WorkerSettings(SharedSettings):
    server_url: str = "http://127.0.0.1:8000"
    # unset: the host's name and a suffix made once and kept in the work folder (workdir.own_name):
    # unique without configuration (two workers on one host, or containers on the host's network,
    # share a host name), and the same after a restart, which recovery relies on
    worker_name: str = ""
    queues: CommaList = ["gpu"]
    executor: str = "docker"  # a name in executors.names.EXECUTORS, checked as the worker starts

    @model_validator(mode="after")
    def _named(self) -> WorkerSettings:
        if not self.worker_name:
            self.worker_name = own_name(self.work_dir, socket.gethostname())
        return self

    slots: int = 0  # 0: one per GPU share (RAI_JOBS_PER_GPU), or 1 without GPUs
    # jobs that may share one GPU at once (time-sliced): "4" for every queue, or "dev=4,*=1" per
    # queue; default 1 (a GPU per job). Ranked runs always have the host and its GPUs alone.
    jobs_per_gpu: Annotated[dict[str, int], NoDecode, BeforeValidator(_per_queue)] = {}

    @field_validator("jobs_per_gpu")
    @classmethod
    def _sane_shares(cls, value: dict[str, int]) -> dict[str, int]:
        for queue, k in value.items():
            if not 1 <= k <= MAX_JOBS_PER_GPU:
                raise ValueError(f"RAI_JOBS_PER_GPU for {queue!r} is {k}: from 1 to {MAX_JOBS_PER_GPU}")
        return value

    def share_for(self, queue: str) -> int:
        """How many jobs of this queue may share one GPU."""
        return self.jobs_per_gpu.get(queue, self.jobs_per_gpu.get("*", 1))

    @property
    def per_gpu(self) -> int:
        """The most jobs any queue lets share one GPU: the number of shares each GPU is cut in."""
        return max([self.share_for(q) for q in self.queues] + [1])

    # a profiling command on a shared GPU holds its turn (gpu.holds.profiler_turn) at most this long while
    # another job's waits: past it, it is stopped, so one student cannot keep the profiler from the rest
    profiler_turn_seconds: int = Field(default=120, gt=0)
    gpus: str = "auto"  # "auto" (nvidia-smi), "none", or device ids "0,1"
    work_dir: Path = Path("/var/lib/rai-worker")

    # limits (a build file may ask for less, never more; wall_seconds and memory_mb are shared)
    pids: int = 1024
    cpus: float = 4.0
    # the CPU quota of a ranked job's timed runs when the course sets a CPU budget (its cgroup's
    # cpu.stat bounds them, and they hold the host alone): a CFS quota would only stall an operation
    # mid-flight once the run's start (CUDA's context, the page-locking) spent a period's share.
    # 0: no quota. Without a budget, and for the reference and profiled runs, RAI_CPUS holds
    timed_cpus: float = Field(default=0.0, ge=0)
    nofile: int = 4096
    tmp_mb: int = 1024
    build_mb: int = 2048  # /build is a tmpfs of this size in the container (counted in its memory)
    build_files: int = 20_000  # files and folders kept of /build; past it (or build_mb) the copy is cut
    # how long a worker keeps a job's build folder and retries while the server answers that its
    # storage is failing (507) or it is busy (503)
    trouble_seconds: float = 1800.0
    collect_seconds: int = 300  # copying /build out may take this long (within the job's wall clock)
    # asked to stop (SIGTERM: an upgrade, `docker compose stop`), the worker takes no new job and its
    # runs go on this long; what is left then is handed back, a named restart (the compose file's
    # stop_grace_period must be longer)
    drain_seconds: float = Field(default=600.0, ge=0)
    # a ranked run lets the jobs waiting for its host go between its timed runs until it has waited
    # this long for them in all (issue 46): others wait for one timed run, it for at most this and
    # one more job's wall limit, however busy the host (0: it never lets others in)
    ranked_let_in_seconds: float = Field(default=300.0, ge=0)
    output_bytes: int = 16 * 1024**2
    output_lines: int = 2_500_000  # empty lines count too: `yes ''` stops here
    line_bytes: int = 64 * 1024
    container_user: str = "1000:1000"
    # "KEY=VALUE,KEY2=VALUE2": set by the operator for every job (dataset paths, …)
    job_env: Annotated[dict[str, str], NoDecode, BeforeValidator(_pairs)] = {}
    read_only_root: bool = True
    # how a container reaches its GPUs: auto (the NVIDIA runtime if the engine has it, else device
    # nodes and the driver's files), runtime, devices; driver_paths: those files or folders (default: ldconfig -p)
    gpu_access: Literal["auto", "runtime", "devices"] = "auto"
    driver_paths: CommaList = []
    # images the operator publishes (resolved to their ids at start), besides those published with
    # `raiworker publish`, pulled through rai and rai's own busybox; "*": any image on the host
    worker_images: CommaList = []
    spare_containers: bool = True  # start each slot's next container when a job ends (Docker executor)
    pty_helper: Path | None = None  # a prebuilt rai-pty; by default built from source at start
    timed_helper: Path | None = None  # a prebuilt rai-timed (ranked runs); by default built from source when first needed
    columns: int = 120  # the jobs' terminal width (COLUMNS, and the pty's size)
    # Slurm (executor=slurm): the batch job each rai job becomes; work_dir must be on a shared file system
    slurm_partition: str = ""
    slurm_account: str = ""
    slurm_extra: str = ""  # more sbatch options, e.g. "--qos=class --constraint=a100"
    slurm_container: Literal["none", "apptainer"] = "none"
    slurm_apptainer: str = "apptainer"  # or singularity
    slurm_grace_seconds: int = 60  # Slurm's --time is the wall limit plus this: rai's own limit acts first
    slurm_poll_seconds: float = 1.0  # squeue/scontrol at most this often per job
    metrics_port: int = 9108  # Prometheus /metrics of this worker; 0 = off
    metrics_addr: str = "127.0.0.1"  # anything but loopback needs metrics_token
    metrics_token: str = ""
