"""Blob storage on local disk: project archives (by sha256), build folders and finished logs.

Writes go to a temporary name and are renamed into place, so a crash never leaves half a file
under a real name.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from raiserver.errors import StorageFailing, TooLarge


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1024 * 1024), b""):
            digest.update(chunk)
    return digest.hexdigest()


def human_size(n: int) -> str:
    return f"{n / 1024:.1f} KiB" if n < 1024**2 else f"{n / 1024**2:.1f} MiB"


@contextmanager
def _writing() -> Iterator[None]:
    """An OSError while storing is the server's storage failing: say so (507), not 'internal error'."""
    try:
        yield
    except OSError as exc:
        raise StorageFailing(exc) from None


class Storage:
    def __init__(self, root: Path):
        self.root = root
        for sub in ("blobs", "builds", "logs", "tmp"):
            (root / sub).mkdir(parents=True, exist_ok=True)

    def sweep_tmp(self, older_than: float = 120.0) -> int:
        """Remove temporary files nothing has written for a while: uploads and logs a killed
        server process left behind (a live upload writes at least every body_idle_seconds, 30 s;
        another server process's files are in use, so age is the rule, at start too)."""
        cutoff = time.time() - older_than
        removed = 0
        for path in (self.root / "tmp").iterdir():
            try:
                if path.stat().st_mtime < cutoff:
                    path.unlink()
                    removed += 1
            except OSError:
                continue
        return removed

    def tempfile(self, suffix: str = "") -> Path:
        with _writing():
            fd, name = tempfile.mkstemp(dir=self.root / "tmp", suffix=suffix)
        os.close(fd)
        return Path(name)

    async def receive(self, chunks: AsyncIterator[bytes], limit: int, what: str) -> tuple[Path, str, int]:
        """Stream a request body to a temp file, hashing as it goes; refuse it (TooLarge) past
        ``limit`` bytes, leaving nothing behind."""
        path = self.tempfile(".part")
        digest = hashlib.sha256()
        size = 0
        try:
            with _writing(), path.open("wb") as fh:
                async for chunk in chunks:
                    size += len(chunk)
                    if size > limit:
                        raise TooLarge(f"{what} is over the limit of {human_size(limit)}")
                    digest.update(chunk)
                    fh.write(chunk)
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        return path, digest.hexdigest(), size

    # -- project archives, content-addressed ---------------------------------------------------
    def archive_path(self, sha256: str) -> Path:
        return self.root / "blobs" / sha256[:2] / f"{sha256}.tar.gz"

    def keep_archive(self, tmp: Path, sha256: str) -> Path:
        dest = self.archive_path(sha256)
        with _writing():
            dest.parent.mkdir(parents=True, exist_ok=True)
            if dest.exists():
                tmp.unlink(missing_ok=True)
            else:
                os.replace(tmp, dest)
        return dest

    # -- build folders ---------------------------------------------------------------------------
    def build_path(self, job_id: str) -> Path:
        return self.root / "builds" / f"{job_id}.tar.gz"

    def keep_build(self, tmp: Path, job_id: str) -> Path:
        dest = self.build_path(job_id)
        with _writing():
            os.replace(tmp, dest)
        return dest

    # -- finished logs ---------------------------------------------------------------------------
    def log_path(self, job_id: str) -> Path:
        return self.root / "logs" / f"{job_id}.jsonl"

    def worker_copy_path(self, job_id: str, attempt: int) -> Path:
        """The lines a run's worker kept, sent when Redis lost some (``LogStore.archive``
        merges them; removed once the log is stored)."""
        return self.root / "logs" / f"{job_id}.{attempt}.worker.jsonl"

    def keep_worker_copy(self, tmp: Path, job_id: str, attempt: int) -> Path:
        dest = self.worker_copy_path(job_id, attempt)
        with _writing():
            os.replace(tmp, dest)
        return dest

    @contextmanager
    def log_writer(self, job_id: str) -> Iterator[TextIO]:
        """A file to write the finished log into, page by page; in place only once complete."""
        tmp = self.tempfile(".log")
        try:
            with _writing(), tmp.open("w", encoding="utf-8") as fh:
                yield fh
            with _writing():
                os.replace(tmp, self.log_path(job_id))
        finally:
            tmp.unlink(missing_ok=True)
