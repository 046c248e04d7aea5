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


def descriptor_kinds(pid: int) -> dict[str, int]:
    """A process's open descriptors by what they are (socket, pipe, anon_inode:…, or a file's
    folder): what a leak report names."""
    kinds: dict[str, int] = {}
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if ":[" in target:  # socket:[123], pipe:[456]
                kind = target.split(":[", 1)[0]
            elif target.startswith("anon_inode:"):  # anon_inode:[eventpoll], anon_inode:inotify
                kind = target
            else:
                kind = os.path.dirname(target) or target
            kinds[kind] = kinds.get(kind, 0) + 1
    except OSError:
        pass
    return kinds


def descriptors(pid: int) -> int:
    """Open file descriptors; 0 once the process is gone."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0
