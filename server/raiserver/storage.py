"""Blob storage on local disk: project archives (by sha256), build folders and finished logs.

Writes go to a temporary name and are renamed into place, so a crash never leaves half a file
under a real name.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from .errors import TooLarge


def human_size(n: int) -> str:
    return f"{n / 1024:.1f} KiB" if n < 1024**2 else f"{n / 1024**2:.1f} MiB"


class Storage:
    def __init__(self, root: Path):
        self.root = root
        for sub in ("blobs", "builds", "logs", "tmp"):
            (root / sub).mkdir(parents=True, exist_ok=True)

    def tempfile(self, suffix: str = "") -> Path:
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
            with path.open("wb") as fh:
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
        os.replace(tmp, dest)
        return dest

    # -- finished logs ---------------------------------------------------------------------------
    def log_path(self, job_id: str) -> Path:
        return self.root / "logs" / f"{job_id}.jsonl"

    @contextmanager
    def log_writer(self, job_id: str) -> Iterator[TextIO]:
        """A file to write the finished log into, page by page; in place only once complete."""
        tmp = self.tempfile(".log")
        try:
            with tmp.open("w", encoding="utf-8") as fh:
                yield fh
            os.replace(tmp, self.log_path(job_id))
        finally:
            tmp.unlink(missing_ok=True)
