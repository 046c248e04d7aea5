"""A process's footprint as the kernel counts it, for leak checks over many jobs."""

from __future__ import annotations

import os
from pathlib import Path


def rss_kib(pid: int) -> int:
    """Resident memory (VmRSS) in KiB; 0 once the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def descriptors(pid: int) -> int:
    """Open file descriptors; 0 once the process is gone."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0
