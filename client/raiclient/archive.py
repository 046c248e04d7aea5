"""Project archives: packing on the client, checking on the server, unpacking on the worker.

One module so the three sides agree on what an acceptable archive is. Unpacking uses the standard
library's ``data`` filter; our own checks add the caps it does not have (count, size, ratio).
"""

from __future__ import annotations

import os
import posixpath
import tarfile
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import pathspec

from .spec import SPEC_FILENAME

IGNORE_FILENAME = ".raiignore"
ALWAYS_IGNORED = [".git/", ".hg/", ".svn/"]


class ArchiveError(ValueError):
    """An archive we refuse; the message names the entry."""


@dataclass(frozen=True)
class ArchiveLimits:
    max_files: int = 20_000
    max_unpacked_bytes: int = 2 * 1024**3
    max_ratio: float = 200.0  # unpacked / compressed, checked once past ratio_floor_bytes
    ratio_floor_bytes: int = 64 * 1024**2
    max_path_chars: int = 1024


@dataclass(frozen=True)
class ArchiveInfo:
    files: int
    unpacked_bytes: int
    spec_bytes: bytes | None
    names: frozenset[str] = frozenset()


@dataclass(frozen=True)
class PackedProject:
    path: Path
    files: int
    bytes: int
    ignore_applied: bool


def _ignore_spec(project: Path) -> tuple[pathspec.PathSpec, bool]:
    lines = list(ALWAYS_IGNORED)
    ignore_file = project / IGNORE_FILENAME
    applied = ignore_file.is_file()
    if applied:
        lines += ignore_file.read_text(encoding="utf-8", errors="replace").splitlines()
    return pathspec.GitIgnoreSpec.from_lines(lines), applied


def pack_project(project: Path, dest_dir: Path | None = None) -> PackedProject:
    """Tar+gzip a project folder, honouring ``.raiignore`` (gitignore syntax)."""
    project = project.resolve()
    spec, applied = _ignore_spec(project)
    fd, name = tempfile.mkstemp(prefix="rai-upload-", suffix=".tar.gz", dir=dest_dir)
    os.close(fd)
    files = 0
    with tarfile.open(name, "w:gz", compresslevel=6) as tar:
        for root, dirs, filenames in os.walk(project):
            rel_root = Path(root).relative_to(project)
            kept_dirs = []
            for d in sorted(dirs):
                rel = (rel_root / d).as_posix()
                if not spec.match_file(rel + "/"):
                    kept_dirs.append(d)
            dirs[:] = kept_dirs
            for d in kept_dirs:
                full = Path(root) / d
                if full.is_symlink():
                    tar.add(full, arcname=(rel_root / d).as_posix(), recursive=False)
                    files += 1
            for f in sorted(filenames):
                rel = (rel_root / f).as_posix()
                if spec.match_file(rel):
                    continue
                tar.add(Path(root) / f, arcname=rel, recursive=False)
                files += 1
    return PackedProject(Path(name), files, Path(name).stat().st_size, applied)


def _check_name(name: str) -> str:
    if "\x00" in name or any(ord(c) < 32 for c in name):
        raise ArchiveError(f"entry {name!r}: name contains a control character")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise ArchiveError(f"entry {name.encode('utf-8', 'surrogateescape')!r}: name is not UTF-8") from None
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise ArchiveError(f"entry {name!r}: absolute paths are not allowed")
    norm = posixpath.normpath(name)
    if norm == ".." or norm.startswith("../") or "/../" in f"/{name}/":
        raise ArchiveError(f"entry {name!r}: '..' in paths is not allowed")
    return norm


def _check_link(member: tarfile.TarInfo, norm: str) -> None:
    target = member.linkname
    if member.issym():
        if target.startswith("/"):
            raise ArchiveError(f"entry {member.name!r}: symlink to an absolute path ({target}) is not allowed")
        resolved = posixpath.normpath(posixpath.join(posixpath.dirname(norm), target))
    else:
        resolved = posixpath.normpath(target)
    if resolved == ".." or resolved.startswith("../") or resolved.startswith("/"):
        kind = "symlink" if member.issym() else "hard link"
        raise ArchiveError(f"entry {member.name!r}: {kind} points outside the project ({target})")


def inspect_archive(path: Path, limits: ArchiveLimits = ArchiveLimits()) -> ArchiveInfo:
    """Read every header of a gzipped tar once; refuse anything unsafe, return the build file."""
    compressed = max(path.stat().st_size, 1)
    files = 0
    total = 0
    spec_bytes: bytes | None = None
    names: set[str] = set()
    try:
        with tarfile.open(path, "r:gz") as tar:
            for member in tar:
                files += 1
                if files > limits.max_files:
                    raise ArchiveError(f"archive has more than {limits.max_files} entries")
                if len(member.name) > limits.max_path_chars:
                    raise ArchiveError(f"entry {member.name[:80]!r}…: path longer than {limits.max_path_chars}")
                norm = _check_name(member.name)
                if member.issym() or member.islnk():
                    _check_link(member, norm)
                elif not (member.isreg() or member.isdir()):
                    raise ArchiveError(f"entry {member.name!r}: device files, FIFOs and other special files are not allowed")
                total += member.size
                if total > limits.max_unpacked_bytes:
                    raise ArchiveError(f"archive unpacks to more than {limits.max_unpacked_bytes // 1024**2} MiB")
                if total > limits.ratio_floor_bytes and total / compressed > limits.max_ratio:
                    raise ArchiveError(f"archive expands more than {limits.max_ratio:.0f}x (a compression bomb?)")
                if member.isreg():
                    names.add(norm)
                if norm == SPEC_FILENAME and member.isreg():
                    fh = tar.extractfile(member)
                    spec_bytes = fh.read(64 * 1024 + 1) if fh else b""
    except ArchiveError:
        raise
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise ArchiveError(f"not a readable .tar.gz archive ({exc.__class__.__name__}: {exc})") from None
    if files == 0:
        raise ArchiveError("archive is empty")
    return ArchiveInfo(files=files, unpacked_bytes=total, spec_bytes=spec_bytes, names=frozenset(names))


def extract_archive(path: Path, dest: Path, limits: ArchiveLimits = ArchiveLimits()) -> ArchiveInfo:
    """Check, then unpack with the ``data`` filter (which also refuses what our check missed)."""
    info = inspect_archive(path, limits)
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "r:gz") as tar:
        tar.extractall(dest, filter="data")
    return info


def pack_directory(directory: Path, out: Path) -> int:
    """Tar+gzip a folder as is (the build folder coming back); returns the number of entries."""
    count = 0
    with tarfile.open(out, "w:gz") as tar:
        for root, dirs, filenames in os.walk(directory):
            for entry in sorted(dirs) + sorted(filenames):
                full = Path(root) / entry
                tar.add(full, arcname=full.relative_to(directory).as_posix(), recursive=False)
                count += 1
    return count
