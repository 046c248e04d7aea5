"""Packing a project folder for upload, honouring ``.raiignore`` (gitignore syntax); what the
server accepts is ``raiprotocol.archive``'s to say."""

from __future__ import annotations

import os
import stat
import tarfile
import tempfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO, NamedTuple

IGNORE_FILENAME = ".raiignore"
VCS_DIRS = (".git", ".hg", ".svn")
ALWAYS_IGNORED = [f"{d}/" for d in VCS_DIRS]


class TooBig(Exception):
    """Packing passed the archive's size limit: stopped there."""


class Survey(NamedTuple):
    """A project as it would be packed, from the file system (and a sample of each big file)."""

    files: int
    bytes: int
    largest: list[tuple[str, int]]  # the five largest files: (path in the project, size)
    packed_guess: int  # about how big the archive will be: big files by a compressed sample of their start


class PackedProject(NamedTuple):
    path: Path
    files: int
    bytes: int
    ignore_applied: bool


def _ignored(project: Path) -> tuple[Callable[[str], bool], bool]:
    """Whether a path (folders end in /) is left out, and whether a .raiignore said so. Without a
    .raiignore only version-control folders are, and pathspec is not even imported (submit's start)."""
    ignore_file = project / IGNORE_FILENAME
    if not ignore_file.is_file():
        return (lambda rel: rel.endswith("/") and rel[:-1].rsplit("/", 1)[-1] in VCS_DIRS), False
    import pathspec

    lines = ALWAYS_IGNORED + ignore_file.read_text(encoding="utf-8", errors="replace").splitlines()
    return pathspec.GitIgnoreSpec.from_lines(lines).match_file, True


def _entries(project: Path, ignored: Callable[[str], bool]) -> Iterator[tuple[Path, str]]:
    """What a pack holds, in order: (file on disk, path in the project); folders only as symlinks."""
    for root, dirs, filenames in os.walk(project):
        rel_root = Path(root).relative_to(project)
        dirs[:] = [d for d in sorted(dirs) if not ignored((rel_root / d).as_posix() + "/")]
        for d in dirs:
            if (Path(root) / d).is_symlink():
                yield Path(root) / d, (rel_root / d).as_posix()
        for f in sorted(filenames):
            rel = (rel_root / f).as_posix()
            if not ignored(rel):
                yield Path(root) / f, rel


def survey(project: Path) -> Survey:
    """Files and bytes a pack of the project would hold, and its largest files, in a moment."""
    project = project.resolve()
    sizes = []
    for full, rel in _entries(project, _ignored(project)[0]):
        try:
            st = full.lstat()
        except OSError:
            continue
        sizes.append((rel, st.st_size if stat.S_ISREG(st.st_mode) else 0))
    largest = sorted(sizes, key=lambda s: -s[1])[:5]
    guess = sum(size for _, size in sizes)
    for rel, size in sizes:
        if size > SAMPLE_ABOVE:  # how well does it compress? its first MiB says (zeros: 1000x, random data: 1x)
            guess -= size - int(size * _sample_ratio(project / rel))
    return Survey(len(sizes), sum(size for _, size in sizes), largest, guess)


SAMPLE_ABOVE = 8 * 1024**2


def _sample_ratio(path: Path) -> float:
    try:
        with path.open("rb") as fh:
            sample = fh.read(1024**2)
    except OSError:
        return 1.0
    return len(zlib.compress(sample, 1)) / max(len(sample), 1)


def pack_project(project: Path, dest_dir: Path | None = None, max_bytes: int | None = None) -> PackedProject:
    """Tar+gzip a project folder, honouring ``.raiignore`` (gitignore syntax); past ``max_bytes``
    of archive (checked as it grows, within each file too), TooBig, and nothing is left behind."""
    project = project.resolve()
    ignored, applied = _ignored(project)
    fd, name = tempfile.mkstemp(prefix="rai-upload-", suffix=".tar.gz", dir=dest_dir)
    os.close(fd)
    files = 0
    try:
        with open(name, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz", compresslevel=6) as tar:
            for full, rel in _entries(project, ignored):
                info = tar.gettarinfo(str(full), arcname=rel)
                if info.isreg():
                    with full.open("rb") as fh:
                        tar.addfile(info, _Watched(fh, raw, max_bytes))
                else:
                    tar.addfile(info)
                files += 1
                if max_bytes is not None and raw.tell() > max_bytes:
                    raise TooBig()
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
    return PackedProject(Path(name), files, Path(name).stat().st_size, applied)


class _Watched:
    """A file being packed: reading it stops once the archive passes its limit."""

    def __init__(self, fh: BinaryIO, archive: BinaryIO, limit: int | None):
        self.fh, self.archive, self.limit = fh, archive, limit

    def read(self, size: int = -1) -> bytes:
        if self.limit is not None and self.archive.tell() > self.limit:
            raise TooBig()
        return self.fh.read(size)
