"""Terminal semantics for job commands: the ``rai-pty`` helper (rai-pty.c beside this file) gives
each command a pseudo-terminal as stdout and another as stderr, so programs line-buffer and
colour their output as they do for a person at a terminal.

The helper is a small static C program, built once per worker with the host's C compiler (a GPU
host has one: nvcc needs it) into the work folder, and bind-mounted read-only into job
containers, whatever their image. ``RAI_PTY_HELPER`` names a prebuilt one instead (the service
image has one); it is copied into the work folder, whose paths the Docker engine can mount.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

log = logging.getLogger("raiworker")

SOURCE = Path(__file__).with_name("rai-pty.c")
IN_CONTAINER = "/opt/rai/rai-pty"


def terminal_env(columns: int) -> dict[str, str]:
    """What nvcc, make, gcc, nsys and ncu look at to decide how a terminal wants its output."""
    return {"TERM": "xterm-256color", "COLUMNS": str(columns), "LINES": "40"}


@lru_cache(maxsize=4)
def pty_helper(work_dir: Path, prebuilt: Path | None = None) -> Path | None:
    """The helper's path, building it if needed; None (and a warning) when it cannot be had."""
    if prebuilt is not None:
        if not os.access(prebuilt, os.X_OK):
            log.warning("RAI_PTY_HELPER %s is not an executable file", prebuilt)
            return None
        dest = work_dir / "bin" / f"rai-pty-{hashlib.sha256(prebuilt.read_bytes()).hexdigest()[:12]}"
        if not os.access(dest, os.X_OK):
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_suffix(f".tmp{os.getpid()}")
            shutil.copyfile(prebuilt, tmp)
            tmp.chmod(0o755)
            os.replace(tmp, dest)
        return dest
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]
    dest = work_dir / "bin" / f"rai-pty-{digest}"
    if os.access(dest, os.X_OK):
        return dest
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        log.warning("no C compiler: job output will not be on a terminal (programs may buffer stdout)")
        return None
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(f".tmp{os.getpid()}")
    try:
        res = subprocess.run([cc, "-O2", "-static", "-o", str(tmp), str(SOURCE)], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("building the pty helper failed (%s): job output will not be on a terminal", exc)
        return None
    if res.returncode != 0:
        log.warning("building the pty helper failed: %s", res.stderr.strip()[-500:])
        tmp.unlink(missing_ok=True)
        return None
    tmp.chmod(0o755)
    os.replace(tmp, dest)
    return dest


def no_terminal_note() -> str:
    return "note: this worker has no pty helper, so output is not on a terminal and programs may buffer stdout"
