"""The Docker executor (RAI_EXECUTOR=docker): each job in a container of its own, its commands exec'd
into it one after another.

    client      the engine: this process's client, a worker's leftover containers, container names
    scripts     the shell rai runs inside a job's containers
    container   a job's containers (how they are made) and the execs in them
    spares      the container a slot starts ahead of time for its next job
    collect     copying /build out of a container, bounded
    measure     a ranked job's timed runs, each in a fresh container under rai-timed
    timed_result what rai-timed wrote of a timed run, read defensively
    cgroup      the cgroup v2 folder a timed run's processes live in
    executor    DockerExecutor, the executor itself
"""

from __future__ import annotations

from .client import LABEL, SPARE, container_name, docker_client, reap_containers, shared_client
from .collect import collect_build, copy_out
from .executor import DockerExecutor
from .scripts import (
    COLLECT,
    END_PROCESSES,
    KEEP_IN,
    KEEP_OUT,
    KILL_JOB,
    LEFT_OVER,
    MEASURE_DIR,
    READ_LIMIT,
)
from .spares import _empty, _move_entries, spare_key

__all__ = [
    "COLLECT",
    "END_PROCESSES",
    "KEEP_IN",
    "KEEP_OUT",
    "KILL_JOB",
    "LABEL",
    "LEFT_OVER",
    "MEASURE_DIR",
    "READ_LIMIT",
    "SPARE",
    "DockerExecutor",
    "_empty",
    "_move_entries",
    "collect_build",
    "container_name",
    "copy_out",
    "docker_client",
    "reap_containers",
    "shared_client",
    "spare_key",
]
