"""The worker's folder (``RAI_WORK_DIR``): what lives where, in one place. A Slurm worker's folder
is on a file system its nodes share, so these paths are the nodes' too.

    jobs/JOB.ATTEMPT/{src,build}   one delivery of a job (emptied at start: an earlier run's)
    running/JOB                    the marker of a job this worker holds; holds its attempt
    locks/                         GPU and host locks (gpus.py)
    slots/PID/src                  a pool process's spare container's /src (Docker)
    bin/                           the pty helper, built or copied here (mountable into containers)
    metrics/                       the pool processes' Prometheus files
    image-pulls/                   images staff asked for, downloaded before loading

A job's build file names ``/src`` and ``/build``; where the job has no container of its own
(process and Slurm executors) ``rewrite_paths`` points them at the job's folders.
"""

from __future__ import annotations

import os
import re
from pathlib import Path


def jobs_dir(work_dir: Path) -> Path:
    return work_dir / "jobs"


def job_dir(work_dir: Path, job_id: str, attempt: int) -> Path:
    return jobs_dir(work_dir) / f"{job_id}.{attempt}"


def running_dir(work_dir: Path) -> Path:
    return work_dir / "running"


def locks_dir(work_dir: Path) -> Path:
    return work_dir / "locks"


def slots_dir(work_dir: Path) -> Path:
    return work_dir / "slots"


def slot_dir(work_dir: Path) -> Path:
    """This pool process's own folder."""
    return slots_dir(work_dir) / str(os.getpid())


def bin_dir(work_dir: Path) -> Path:
    return work_dir / "bin"


def metrics_dir(work_dir: Path) -> Path:
    return work_dir / "metrics"


def pulls_dir(work_dir: Path) -> Path:
    return work_dir / "image-pulls"


_PATHS = re.compile(r"(?<![\w./~-])/(src|build)(?=/|\s|$|[\"';:*)])")


def rewrite_paths(command: str, src: str, build: str) -> str:
    return _PATHS.sub(lambda m: src if m.group(1) == "src" else build, command)
