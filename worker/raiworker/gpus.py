"""GPUs of this host: discovery through nvidia-smi, and one job per GPU at a time.

Each Celery process takes a GPU by holding an exclusive lock file for it, so a job's container is
given exactly the device it holds, whatever the number of processes.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from raiprotocol.models import GpuInfo

from .errors import NoGpu


def discover(spec: str) -> list[GpuInfo]:
    """``auto``: ask nvidia-smi; ``none``: no GPUs; ``0,1``: these ids (details from nvidia-smi if any)."""
    if spec.strip().lower() == "none":
        return []
    found: list[GpuInfo] = []
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=index,name,memory.total", "--format=csv,noheader,nounits"],
                capture_output=True, text=True, timeout=20, check=True,
            ).stdout
            for row in out.strip().splitlines():
                idx, name, mem = (p.strip() for p in row.split(","))
                found.append(GpuInfo(index=int(idx), name=name, memory_mb=int(float(mem))))
        except (subprocess.SubprocessError, ValueError, OSError):
            found = []
    if spec.strip().lower() == "auto":
        return found
    wanted = [int(x) for x in spec.split(",") if x.strip()]
    by_index = {g.index: g for g in found}
    return [by_index.get(i, GpuInfo(index=i)) for i in wanted]


@contextmanager
def hold_gpus(lock_dir: Path, gpus: list[GpuInfo], count: int, wait: float = 3600.0) -> Iterator[list[str]]:
    """Yield ``count`` GPU ids held exclusively by this process until the block ends."""
    if count <= 0:
        yield []
        return
    if count > len(gpus):
        raise NoGpu(f"the job asks for {count} GPU(s); this worker has {len(gpus)}")
    lock_dir.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + wait
    while True:
        held: list[tuple[int, int]] = []
        for g in gpus:
            fd = os.open(lock_dir / f"gpu{g.index}.lock", os.O_CREAT | os.O_RDWR, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                held.append((g.index, fd))
                if len(held) == count:
                    break
            except BlockingIOError:
                os.close(fd)
        if len(held) == count:
            break
        for _, fd in held:
            os.close(fd)
        if time.monotonic() > deadline:
            raise NoGpu("timed out waiting for a free GPU")
        time.sleep(0.2)
    try:
        yield [str(i) for i, _ in held]
    finally:
        for _, fd in held:
            os.close(fd)


@contextmanager
def host_share(lock_dir: Path, exclusive: bool) -> Iterator[None]:
    """Every job holds the host lock shared; an exclusive job (timing runs) holds it alone, so it
    starts only when the host is idle and nothing starts beside it.

    An exclusive job is not starved (issue 32): it first takes the gate, which every job passes
    (shared, for a moment) on its way in, and holds it while it waits for the jobs already running
    to end: from then on no new job starts on the host, so it waits at most for the longest of
    those (each bounded by its wall clock), however many jobs come after it."""
    lock_dir.mkdir(parents=True, exist_ok=True)
    gate = os.open(lock_dir / "host.gate", os.O_CREAT | os.O_RDWR, 0o644)
    fd = os.open(lock_dir / "host.lock", os.O_CREAT | os.O_RDWR, 0o644)
    try:
        if exclusive:
            fcntl.flock(gate, fcntl.LOCK_EX)
            fcntl.flock(fd, fcntl.LOCK_EX)
        else:
            fcntl.flock(gate, fcntl.LOCK_SH)  # waits while an exclusive job waits or runs
            fcntl.flock(fd, fcntl.LOCK_SH)
            fcntl.flock(gate, fcntl.LOCK_UN)
        yield
    finally:
        os.close(fd)
        os.close(gate)
