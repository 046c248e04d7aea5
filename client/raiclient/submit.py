"""``raiclient submit``: pack the project, upload it, follow the job live, say how it ended.

A student runs this more than anything else, so it runs on the standard library: no typer, rich,
httpx or pydantic is imported on its way (they cost a third of a second before the first byte
goes up). ``commands.py`` defines its options; ``main`` runs it. The heavier pieces come in only
where they pay:

- a project packed to more than ``PRECHECK_BYTES`` has its build file checked here and the
  credentials on the server before it goes up (with a progress bar on a terminal); a small one goes
  up at once and the server, which checks both anyway, answers with the same sentences;
- the upload rides over a server restart or a cut (``reconnect.riding``: sent again from the start
  within the reconnect window, said in one line); every try carries this submit's key
  (``Idempotency-Key``), so a retry of an upload that landed gets that job back, not a second one;
- following the job is ``follow.watch``, as for ``raiclient logs --follow``: when the live stream
  breaks (bad Wi-Fi, a server restart) it reconnects with back-off from the last line printed, so
  nothing is lost or printed twice.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from raiprotocol.archive import ArchiveLimits
from raiprotocol.profile import ProfileError, load_profile
from raiprotocol.project import project_problem
from raiprotocol.states import ExitCode

from .errors import ApiError
from .output import error, kib, say, waits
from .progress import UploadBar
from .reconnect import riding
from .transport import CHUNK, Http

# Projects up to this size go up without a check first: a bad key or build file then costs the
# student under a second of upload on an ordinary link, while the check (pydantic's import and a
# round trip, ~0.25 s on a laptop) would cost every good submit. Bigger ones are checked first.
PRECHECK_BYTES = 1024 * 1024


class _Reading:
    """A file read as it is sent, telling ``progress`` how much went."""

    def __init__(self, fh: BinaryIO, progress: Callable[[int], None]):
        self.fh, self.progress = fh, progress

    def read(self, n: int = -1) -> bytes:
        data = self.fh.read(CHUNK if n < 0 else n)
        if data:
            self.progress(len(data))
        return data


def _too_big(found: Any, what: str, limit: str) -> str:
    """A refusal that helps: what is too big, the largest files, and how to leave them out."""
    largest = "\n".join(f"  {kib(size):>12}  {rel}" for rel, size in found.largest if size)
    return (
        f"the project is too big to upload: {what} (the limit is {limit}). Its largest files:\n{largest}\n"
        "Leave out what the build does not need with a .raiignore file in the project (gitignore syntax), e.g. "
        f"a line '{found.largest[0][0] if found.largest else 'data/'}'"
    )


def _check_spec(path: Path) -> None:
    """The build file read and checked here (pydantic's import is worth it before a big upload);
    raises ApiError with every message. Without pydantic (``raiclient.pyz`` on a bare Python) the
    server's own check, which it makes anyway, is the one."""
    try:
        from raiprotocol.spec import SpecError, load_spec
    except ImportError:
        return

    try:
        load_spec(path)
    except SpecError as exc:
        raise ApiError("\n".join(exc.messages)) from None


def _upload(conn: Http, archive: Path, size: int, queue: str | None, kind: str, key: str) -> dict[str, Any]:
    params = {"kind": kind, **({"queue": queue} if queue else {})}
    headers = {"Content-Type": "application/gzip", "Content-Length": str(size), "Idempotency-Key": key}
    with archive.open("rb") as fh:
        bar = UploadBar(size) if size > PRECHECK_BYTES and os.isatty(1) else None  # long enough to deserve a bar
        started = time.monotonic()
        try:
            body = _Reading(fh, bar.advance) if bar is not None else fh
            job: dict[str, Any] = conn.json("POST", "/api/v1/jobs", params=params, headers=headers, timeout=300.0, body=body)
        finally:
            if bar is not None:
                bar.clear()
        if size > PRECHECK_BYTES:
            rate = size / max(time.monotonic() - started, 1e-3) / 1024**2
            say(f"Uploaded {kib(size)}" + (f" ({rate:.1f} MB/s)" if size >= 1024**2 else ""))
        return job


def run(path: Path, queue: str | None, kind: str, detach: bool, server: str | None) -> int:
    """The whole submit; returns the exit status (ApiErrors become one line on stderr)."""
    from .pack import TooBig, pack_project, survey

    problem = project_problem(path, kind) if path.is_dir() else f"{path} is not a folder" if path.exists() else f"{path} does not exist"
    if problem:
        error(problem)
        return ExitCode.CLIENT_ERROR
    try:
        profile = load_profile(server)
    except ProfileError as exc:
        error(str(exc))
        return ExitCode.CLIENT_ERROR
    conn = Http(profile)
    try:
        packed = None
        try:
            found = survey(path)  # the sizes alone, in a moment: a big project is refused before any packing
            limits = ArchiveLimits()
            if found.files > limits.max_files or found.bytes > limits.max_unpacked_bytes:
                raise ApiError(
                    _too_big(
                        found, f"{found.files} files, {kib(found.bytes)}", f"{limits.max_files} files, {kib(limits.max_unpacked_bytes)}"
                    )
                )
            max_upload = None
            if found.bytes > PRECHECK_BYTES:  # worth checking here first: the build file, then the keys
                _check_spec(path)
                me = riding(conn, lambda: conn.json("GET", "/api/v1/me"), "the check of your keys", "asking again")
                max_upload = me.get("max_upload_bytes")  # a bad key fails here, not after packing
                if max_upload and found.packed_guess > max_upload:
                    raise ApiError(_too_big(found, f"about {kib(found.packed_guess)} packed", kib(max_upload)))
                if found.bytes > limits.ratio_floor_bytes and found.bytes / max(found.packed_guess, 1) > limits.max_ratio:
                    raise ApiError(
                        _too_big(
                            found,
                            f"{kib(found.bytes)} that would pack to about {kib(found.packed_guess)} (files of zeros or filler?)",
                            f"{limits.max_ratio:.0f}x",
                        )
                    )
            say(f"Submitting as {profile.username or profile.access_key[:8]} @ {profile.server}")
            try:
                packed = pack_project(path, max_bytes=max_upload)
            except TooBig:
                raise ApiError(_too_big(found, f"more than {kib(max_upload or 0)} packed", f"{kib(max_upload or 0)}")) from None
            say(f"Packing project ({packed.files} files, {kib(packed.bytes)}" + (", .raiignore applied)" if packed.ignore_applied else ")"))
            if found.bytes > limits.ratio_floor_bytes and found.bytes / max(packed.bytes, 1) > limits.max_ratio:
                raise ApiError(
                    _too_big(
                        found,
                        f"{kib(found.bytes)} that pack to {kib(packed.bytes)} (files of zeros or filler?)",
                        f"{limits.max_ratio:.0f}x",
                    )
                )
            key = os.urandom(16).hex()  # this submission's, on every try of its upload
            job = riding(
                conn, lambda: _upload(conn, packed.path, packed.bytes, queue, kind, key), "the upload", "sending it again from the start"
            )
        finally:
            if packed is not None:
                packed.path.unlink(missing_ok=True)
        said = waits(job) if job.get("position") else None
        position = f" (position {job['position']}{f', {said}' if said else ''})" if job.get("position") else ""
        say(f"Job {job['id']} queued on '{job['queue']}'{position}  [image {job['image']}]")
        if job.get("deadline_note") and (detach or not job.get("late")):
            say(str(job["deadline_note"]))  # a late job's log says it first thing: said once (issue 49)
        if detach:
            say(f"Detached. Follow: raiclient logs {job['id']} --follow")  # two lines: each fits 80 columns
            say(f"          Status: raiclient status {job['id']}")
            return ExitCode.OK
        from .follow import watch

        return watch(conn, job["id"], position=job.get("position"), eta=job.get("eta_high", job.get("eta_seconds")))
    except ApiError as exc:
        for line in str(exc).split("\n"):
            error(line)
        return exc.code
    except KeyboardInterrupt:
        error("interrupted while submitting; 'raiclient history' shows whether the job was queued")
        return ExitCode.DETACHED
    finally:
        conn.close()


def main(args: argparse.Namespace) -> int:
    """``raiclient submit`` as ``commands.py`` parsed it."""
    return run(Path(args.path), args.queue, args.kind, args.detach, args.server)
