"""The worker's folder (``RAI_WORK_DIR``): what lives where, in one place. A Slurm worker's folder
is on a file system its nodes share, so these paths are the nodes' too.

    jobs/JOB.ATTEMPT/{src,build}   one delivery of a job (emptied at start: an earlier run's)
    running/JOB                    the marker of a job this worker holds; holds its attempt
    locks/                         GPU and host locks (gpu/holds.py)
    slots/PID/src                  a pool process's spare container's /src (Docker)
    slots/PID/lease/until          until when its job may run (lease.write_stamp), for the watchers
    bin/                           the pty helper, built or copied here (mountable into containers)
    metrics/                       the pool processes' Prometheus files
    tmp/                           the worker's own temporary files (TMPDIR), emptied at start
    draining                       asked to stop: until when its runs may go on (lease.drain_over)
    image-pulls/                   images staff asked for, downloaded before loading
    name                           the worker's own name, when RAI_WORKER_NAME does not give one

A job's build file names ``/src`` and ``/build``; where the job has no container of its own
(process and Slurm executors) ``rewrite_paths`` points them at the job's folders.
"""

from __future__ import annotations

import os
import re
import secrets
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


def lease_stamp(work_dir: Path) -> Path:
    """This pool process's lease stamp: its folder is mounted into the containers it makes (its
    spare one too, made before the job it will run is known)."""
    return slot_dir(work_dir) / "lease" / "until"


def drain_file(work_dir: Path) -> Path:
    return work_dir / "draining"


def tmp_dir(work_dir: Path) -> Path:
    """The worker's TMPDIR: what its processes leave there when killed (billiard's ``pymp-*``
    folders, one per SIGKILL) is removed at its next start, not left in the host's /tmp."""
    return work_dir / "tmp"


def bin_dir(work_dir: Path) -> Path:
    return work_dir / "bin"


def metrics_dir(work_dir: Path) -> Path:
    return work_dir / "metrics"


def pulls_dir(work_dir: Path) -> Path:
    return work_dir / "image-pulls"


def own_name(work_dir: Path, host: str) -> str:
    """The worker's name when RAI_WORKER_NAME is unset: ``HOST-xxxxxx``, made at its first start
    and kept in ``work_dir/name``; the host name alone if the folder cannot be written."""
    path = work_dir / "name"
    try:
        return path.read_text().strip() or host
    except FileNotFoundError:
        pass
    except OSError:
        return host
    name = f"{host}-{secrets.token_hex(3)}"
    try:
        work_dir.mkdir(parents=True, exist_ok=True)
        with open(path, "x") as fh:  # two processes at once: the first one's name stands
            fh.write(name + "\n")
    except FileExistsError:
        return path.read_text().strip() or host
    except OSError:
        return host
    return name


_PATHS = re.compile(r"(?<![\w./~-])/(src|build)(?=/|\s|$|[\"';:*)])")


def rewrite_paths(command: str, src: str, build: str) -> str:
    return _PATHS.sub(lambda m: src if m.group(1) == "src" else build, command)
