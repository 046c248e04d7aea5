"""Copying a job's /build out of its container at the job's end (and, for a ranked run, what its
timed runs start from): a tar streamed from an exec of the image's own tar, extracted with
``safe_extract`` into a host folder, bounded like the commands (the wall clock, the cancel) and by
RAI_BUILD_MB and RAI_BUILD_FILES."""

from __future__ import annotations

import contextlib
import io
import itertools
import tarfile
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from docker.errors import DockerException
from docker.utils.socket import STDOUT, frames_iter

from raiprotocol.archive import OverLimit, safe_extract
from raiprotocol.models import JobState

from ...config import WorkerSettings
from ...logsink import LogSink
from ...terminal import IN_CONTAINER, Frames
from ..base import JobContext, Outcome
from .client import _close, _exit_code
from .scripts import COLLECT, END_JOB_ENV, LEFT_OVER

if TYPE_CHECKING:  # a name for the buffer protocol, in typeshed only
    from _typeshed import WriteableBuffer


def copy_out(api: Any, container_id: str, argv: list[str], user: str, dest: Path, s: WorkerSettings) -> int | None:
    """Run ``argv`` in the container (a script that writes a tar to its stdout, or the helper ending
    the job's processes first: ``scripts.ending_job``) and extract that stream into ``dest``
    (``extract``). Returns the exec's exit status."""
    exec_id = api.exec_create(container_id, argv, user=user, environment=END_JOB_ENV if argv[:1] == [IN_CONTAINER] else None)["Id"]
    # a socket of our own: closed on a cut, so the engine stops copying at once (with the
    # stream left open, killing the container waited 10 s for it)
    conn = api.exec_start(exec_id, socket=True)
    try:
        extract((data for stream, data in frames_iter(conn, tty=False) if stream == STDOUT), dest, s)
    finally:
        _close(conn)
    return _exit_code(api, exec_id)


def extract(chunks: Iterable[bytes], dest: Path, s: WorkerSettings) -> None:
    """A tar stream into ``dest``: the job controls it, so nothing in it may write outside the
    folder (links out of the tree, entries through links, devices and the like are left behind),
    and past RAI_BUILD_MB or RAI_BUILD_FILES it is cut (OverLimit). Reads the stream to its end."""
    # headers and padding (1 KiB an entry at most) ride on top of the files themselves
    budget = _Budget(chunks, s.build_mb * 1024**2 + s.build_files * 1024 + 1024**2)
    with tarfile.open(fileobj=_IterReader(budget), mode="r|") as tar:
        safe_extract(tar, dest, max_bytes=s.build_mb * 1024**2, max_entries=s.build_files)
    for _ in budget:  # the exec's end (tar's last padding), so its exit status is known
        pass


class EndMarked(Frames):
    """The exec of a job's last command that goes on to copy /build (rai-pty's RAI_PTY_THEN): the
    command's output to the log until rai-pty's end line with this exec's token, which gives the
    command's status; what follows on stdout is the tar (``after``). Output that could be the start
    of that line waits for the next frame (the line starts with a NUL byte: seldom any wait)."""

    def __init__(self, sink: LogSink, token: str) -> None:
        super().__init__(sink)
        self.marker = b"\0rai-end:" + token.encode() + b":"
        self.held = b""
        self.code: int | None = None  # the command's status, once its end line came
        self.after = bytearray()

    def emit(self, stream: int, data: bytes) -> None:
        if stream != STDOUT:
            super().emit(stream, data)  # the job's stderr, however late the engine relays it
        elif self.code is not None:
            self.after += data
        else:
            self._scan(self.held + data)

    def _scan(self, data: bytes) -> None:
        at = data.find(self.marker)
        if at < 0:
            keep = _marker_start(data, self.marker)
            self.held = data[len(data) - keep :]
            if len(data) > keep:
                super().emit(STDOUT, data[: len(data) - keep])
            return
        if at:
            super().emit(STDOUT, data[:at])
        rest = data[at + len(self.marker) :]
        line_end = rest.find(b"\n")
        if line_end < 0 and len(rest) < 8:
            self.held = data[at:]  # the status's digits come in the next frame
            return
        digits = rest[:line_end] if line_end >= 0 else b""
        self.code = int(digits) if digits.isdigit() and len(digits) <= 3 else 255
        self.held = b""
        self.after += rest[line_end + 1 :] if line_end >= 0 else rest

    def flush_held(self) -> None:
        """The stream ended without the end line: what was held back is the job's output after all."""
        if self.held and self.code is None:
            super().emit(STDOUT, self.held)
            self.held = b""


def _marker_start(data: bytes, marker: bytes) -> int:
    """The length of the longest end of ``data`` that begins ``marker`` (0: none)."""
    start = max(0, len(data) - len(marker) + 1)
    at = data.rfind(marker[:1], start)
    while at >= 0:
        if marker.startswith(data[at:]):
            return len(data) - at
        at = data.rfind(marker[:1], start, at)
    return 0


class NothingCame(Exception):
    """The last command's exec ended after its end line without any of the tar: its copy did not
    run (its shell could not start, or a kill of the job's processes took it too)."""


class Handover(NamedTuple):
    """A job's last exec, past its command's end: what ``collect_build`` reads the tar from."""

    conn: Any
    raw: Any  # its socket
    exec_id: str
    frames: EndMarked

    def chunks(self, until: float) -> Iterator[bytes]:
        """The tar's bytes as they come, to the stream's end (the copy's end, or the container
        killed by the copy's guard), or ``until`` (should that kill not end it)."""
        while True:
            if self.frames.after:
                chunk = bytes(self.frames.after)
                self.frames.after.clear()
                yield chunk
            try:
                data = self.raw.recv(65536)
            except TimeoutError:
                if time.monotonic() > until:
                    return
                continue
            except OSError:
                return
            if not data:
                if self.frames.after:
                    yield bytes(self.frames.after)
                return
            self.frames.feed(data)

    def finish(self, api: Any, dest: Path, s: WorkerSettings, until: float) -> int | None:
        """The copy into ``dest`` (``extract``); returns the exec's exit status (the copy's).
        NothingCame: the stream ended before the tar began (the copy never ran in it)."""
        chunks = self.chunks(until)
        try:
            first = next(chunks, b"")
            if not first:
                raise NothingCame
            extract(itertools.chain([first], chunks), dest, s)
        finally:
            self.close()
        return _exit_code(api, self.exec_id)

    def close(self) -> None:
        _close(self.conn)


class _Guard:
    """While a copy runs: on a cancel or past its deadline, end it by killing the container (the
    stream then ends); ``why`` says which ("cancel", "wall": the job's wall clock, "time": the
    collection allowance)."""

    def __init__(self, container: Any, ctx: JobContext, cancel: threading.Event, deadline: float) -> None:
        self.container, self.ctx, self.cancel, self.deadline = container, ctx, cancel, deadline
        self.why: str | None = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, name=f"collect-{ctx.job_id}", daemon=True)

    def __enter__(self) -> _Guard:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=5)

    def _watch(self) -> None:
        while not self.stop.wait(0.1):
            if self.cancel.is_set() or time.monotonic() > self.deadline:
                self.why = "cancel" if self.cancel.is_set() else "wall" if time.monotonic() > self.ctx.wall_deadline else "time"
                with contextlib.suppress(DockerException):
                    self.container.kill()
                return


def collect_build(
    api: Any,
    container: Any,
    user: str,
    ctx: JobContext,
    cancel: threading.Event,
    handover: Handover | None = None,
    argv: list[str] | None = None,
) -> tuple[Outcome | None, bool | None]:
    """Stop the job's processes and copy /build (a tmpfs: it dies with the container, and
    `docker cp` cannot read it) out through the image's own tar into ``ctx.build_dir`` (a 1 TiB
    sparse file or 300,000 small files once held a slot for hours). Returns an Outcome when the
    copy was cut or incomplete, and whether every process of the job was seen gone (None: the
    copy did not get that far). ``handover``: the last command's exec already runs the copy;
    ``argv``: the exec that ends the job's processes and copies (``scripts.ending_job``)."""
    s = ctx.settings
    deadline = min(ctx.wall_deadline, time.monotonic() + s.collect_seconds)
    problem: str | None = None
    contained: bool | None = None
    with _Guard(container, ctx, cancel, deadline) as guard:
        try:
            code: int | None = None
            copied = False
            if handover is not None:
                with contextlib.suppress(NothingCame):
                    code, copied = handover.finish(api, ctx.build_dir, s, deadline + 10), True
            if not copied and not guard.why:
                code = copy_out(api, container.id, argv or ["/bin/sh", "-c", COLLECT], user, ctx.build_dir, s)
            contained = proved_contained(code)
            if code not in (0, LEFT_OVER) and not guard.why:
                problem = f"the copy ended with status {code}"
        except OverLimit as exc:
            return Outcome(
                JobState.failed,
                message=f"the build folder was cut: it holds {exc} (RAI_BUILD_FILES / RAI_BUILD_MB); what was copied until then is kept",
            ), contained
        except (DockerException, tarfile.TarError, OSError) as exc:
            problem = f"{exc.__class__.__name__}: {str(exc)[:200]}"
    return _collected(ctx, guard.why, problem), contained


def proved_contained(code: int | None) -> bool:
    """Whether the copy's exit status shows every process of the job gone: only if its script ran
    to its end (tar's own status) and found none left; a status from a signal (the script or its
    tar killed part way, which a stream cut at an entry's end does not reveal) proves nothing."""
    return code is not None and code < 126 and code != LEFT_OVER


def _collected(ctx: JobContext, why: str | None, problem: str | None) -> Outcome | None:
    """What became of the copy: None when it is whole."""
    if why == "cancel":
        return Outcome(JobState.cancelled, message="cancelled while the build folder was being copied")
    if why == "wall":
        return Outcome(
            JobState.timed_out,
            message=f"timed out: the build folder was being copied when the job hit its "
            f"wall-time limit of {ctx.wall_seconds} s; it is incomplete",
        )
    if why == "time":
        return Outcome(
            JobState.failed,
            message=f"the build folder was cut: copying it took more than {ctx.settings.collect_seconds} s; "
            "what was copied until then is kept",
        )
    if problem is not None:
        return Outcome(JobState.error, message=f"the build folder could not be copied completely ({problem}); it is incomplete")
    return None


class _Budget:
    """The chunks of a stream, up to ``limit`` bytes in all: past it, OverLimit."""

    def __init__(self, chunks: Iterable[bytes], limit: int) -> None:
        self.chunks, self.limit, self.seen = iter(chunks), limit, 0

    def __iter__(self) -> _Budget:
        return self

    def __next__(self) -> bytes:
        chunk = next(self.chunks)
        self.seen += len(chunk)
        if self.seen > self.limit:
            raise OverLimit(f"more than {self.limit // 1024**2} MiB of files (sparse files count whole)")
        return chunk


class _IterReader(io.RawIOBase):
    """A file-like view of an iterator of byte chunks (the Docker archive stream)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self.chunks: Iterator[bytes] = iter(chunks)
        self.rest = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buf: WriteableBuffer) -> int:
        while not self.rest:
            try:
                self.rest = next(self.chunks)
            except StopIteration:
                return 0
        view = memoryview(buf)
        n = min(len(view), len(self.rest))
        view[:n] = self.rest[:n]
        self.rest = self.rest[n:]
        return n
