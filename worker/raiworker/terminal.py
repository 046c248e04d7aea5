"""Terminal semantics for job commands: the ``rai-pty`` helper (rai-pty.c beside this file) gives
each command a pseudo-terminal as stdout and another as stderr, so programs line-buffer and
colour their output as they do for a person at a terminal.

The helper is a small static C program, built once per worker with the host's C compiler (a GPU
host has one: nvcc needs it) into the work folder, and bind-mounted read-only into job
containers, whatever their image. ``RAI_PTY_HELPER`` names a prebuilt one instead (the service
image has one); it is copied into the work folder, whose paths the Docker engine can mount.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import select
import shutil
import socket
import struct
import subprocess
import time
from functools import lru_cache
from pathlib import Path

from raiprotocol.models import LogStream

from .logsink import LogSink
from .workdir import bin_dir

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
        return _prebuilt(work_dir, prebuilt, "rai-pty", "RAI_PTY_HELPER")
    return build_helper(work_dir, SOURCE, "rai-pty", "job output will not be on a terminal (programs may buffer stdout)")


# Others (a job's user) may run a helper but not read it: a process whose program its user cannot
# read is not dumpable from its first instruction, so no process of the job can read rai-pty's
# environment or memory, or trace it, even in the moment before it makes itself so (issue 38)
HELPER_MODE = 0o711


def _installed(dest: Path) -> Path:
    with contextlib.suppress(OSError):  # a helper put there by another user keeps its mode
        if dest.stat().st_mode & 0o777 != HELPER_MODE:
            dest.chmod(HELPER_MODE)
    return dest


@lru_cache(maxsize=4)
def hands_over(helper: Path) -> bool:
    """Whether this rai-pty goes on to a script after the command (RAI_PTY_THEN, with its end line):
    a prebuilt one from before that would show the token to the job instead. Asked once, here."""
    try:
        res = subprocess.run(
            [str(helper), "/bin/true"], env={"RAI_PTY_THEN": "exit 0", "RAI_PTY_END": "probe"}, capture_output=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return res.stdout.endswith(b"\0rai-end:probe:0\n") and res.returncode == 0


@lru_cache(maxsize=4)
def ends_job(helper: Path) -> bool:
    """Whether this rai-pty ends a job's processes itself (``--end-then``, issue 50): probed without
    RAI_PTY_END_JOB, so it kills nothing here; one from before runs "--end-then" as a program."""
    try:
        res = subprocess.run([str(helper), "--end-then", "exit 7"], env={}, capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return res.returncode == 7


def _prebuilt(work_dir: Path, prebuilt: Path, name: str, setting: str) -> Path | None:
    """A prebuilt helper (the service image has them), copied into the work folder, whose paths the
    Docker engine can mount."""
    if not os.access(prebuilt, os.X_OK):
        log.warning("%s %s is not an executable file", setting, prebuilt)
        return None
    dest = bin_dir(work_dir) / f"{name}-{hashlib.sha256(prebuilt.read_bytes()).hexdigest()[:12]}"
    if not os.access(dest, os.X_OK):
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_suffix(f".tmp{os.getpid()}")
        shutil.copyfile(prebuilt, tmp)
        tmp.chmod(HELPER_MODE)
        os.replace(tmp, dest)
    return _installed(dest)


TIMED_SOURCE = Path(__file__).with_name("rai-timed.c")
TIMED_IN_CONTAINER = "/opt/rai/rai-timed"


@lru_cache(maxsize=4)
def timed_helper(work_dir: Path, prebuilt: Path | None = None) -> Path | None:
    """``rai-timed`` (rai-timed.c): a ranked run's timed command as the job's user, every process
    of the job frozen the moment it exits (issue 32); None when it cannot be had."""
    if prebuilt is not None:
        return _prebuilt(work_dir, prebuilt, "rai-timed", "RAI_TIMED_HELPER")
    return build_helper(work_dir, TIMED_SOURCE, "rai-timed", "ranked runs cannot be measured on this worker")


def build_helper(work_dir: Path, source: Path, name: str, without: str) -> Path | None:
    """A static helper built once from its C source into the work folder (a GPU host has a C
    compiler: nvcc needs one), named by its source's hash; ``without``: what a failure costs."""
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:12]
    dest = bin_dir(work_dir) / f"{name}-{digest}"
    if os.access(dest, os.X_OK):
        return _installed(dest)
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        log.warning("no C compiler to build %s: %s", name, without)
        return None
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(f".tmp{os.getpid()}")
    try:
        res = subprocess.run([cc, "-O2", "-static", "-o", str(tmp), str(source)], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("building %s failed (%s): %s", name, exc, without)
        return None
    if res.returncode != 0:
        log.warning("building %s failed: %s; %s", name, res.stderr.strip()[-500:], without)
        tmp.unlink(missing_ok=True)
        return None
    tmp.chmod(HELPER_MODE)
    os.replace(tmp, dest)
    return dest


def no_terminal_note() -> str:
    return "note: this worker has no pty helper, so output is not on a terminal and programs may buffer stdout"


# Output in bulk comes from the Docker engine in pieces of a pipe page (4 KiB): one Redis batch, one
# live event and one client write each. A piece that size says more is on its way, so what follows
# within GATHER_S (up to GATHER_BYTES) joins it: a job printing 2,000,000 lines made ~1,450 batches
# of ~585 lines (issue 38). Smaller pieces (a program printing now and then) go on at once.
GATHER_FROM = 4096
GATHER_S = 0.005
GATHER_BYTES = 256 * 1024


def gathered(raw: socket.socket, first: bytes) -> tuple[bytes, bool]:
    """``first`` and what follows it on ``raw`` within a moment, when ``first`` is a bulk piece;
    and whether the stream ended meanwhile."""
    if len(first) < GATHER_FROM:
        return first, False
    parts, size = [first], len(first)
    ready = select.poll()  # not select(): a descriptor numbered 1024 or more is fine
    ready.register(raw.fileno(), select.POLLIN)
    deadline = time.monotonic() + GATHER_S
    while size < GATHER_BYTES:
        left = deadline - time.monotonic()
        if left <= 0 or not ready.poll(left * 1000):
            break
        try:
            data = raw.recv(65536)
        except (BlockingIOError, TimeoutError):
            break
        except OSError:
            return b"".join(parts), True
        if not data:
            return b"".join(parts), True
        parts.append(data)
        size += len(data)
    return b"".join(parts), False


class Frames:
    """Docker's multiplexed stream format (8-byte headers: stream id, size; then the payload), which
    the Docker executor reads from an exec and the Slurm agent writes to its output file."""

    STREAMS = {1: LogStream.out, 2: LogStream.err}

    def __init__(self, sink: LogSink):
        self.sink = sink
        self.buf = bytearray()

    def feed(self, data: bytes) -> None:
        """Consecutive frames of one stream go to the sink as one chunk (one batch in Redis)."""
        self.buf += data
        run_stream = -1  # no frame yet
        run: list[bytes] = []
        pos = 0
        while len(self.buf) - pos >= 8:
            stream, size = self.buf[pos], struct.unpack(">I", self.buf[pos + 4 : pos + 8])[0]
            if len(self.buf) - pos < 8 + size:
                break
            if stream != run_stream and run:
                self.emit(run_stream, b"".join(run))
                run = []
            run_stream = stream
            run.append(bytes(self.buf[pos + 8 : pos + 8 + size]))
            pos += 8 + size
        del self.buf[:pos]
        if run:
            self.emit(run_stream, b"".join(run))

    def emit(self, stream: int, data: bytes) -> None:
        self.sink.feed(self.STREAMS.get(stream, LogStream.out), data)

    def cut_short(self) -> None:
        """What came of a frame the writer never finished (it was killed between a header and the
        end of its bytes): the bytes that did come, on their stream, rather than nothing."""
        if len(self.buf) > 8:
            self.emit(self.buf[0], bytes(self.buf[8:]))
        self.buf.clear()

    def drain(self, raw: socket.socket) -> None:
        """What is already on the wire after the process ended."""
        raw.settimeout(0.1)
        try:
            while data := raw.recv(65536):
                self.feed(data)
        except OSError:
            pass
