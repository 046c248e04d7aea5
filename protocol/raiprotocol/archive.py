"""Project archives: checked on the server, unpacked on the worker (and the build folder packed
there and unpacked from containers); the client packs with ``raiclient.pack``.

One module so the sides agree on what an acceptable archive is. Links are resolved the way
the file system would resolve them, through every other link in the archive (a chain of symlinks
gets past string checks and past the standard library's ``data`` filter on Python < 3.12.11 /
3.11.13, CVE-2025-4517); no entry may pass through a symlink; and unpacking is our own
(``safe_extract``): it never writes through a link, whatever the Python version, and sets no
owner or special mode bits.
"""

from __future__ import annotations

import os
import posixpath
import stat
import tarfile
import time
import zlib
from pathlib import Path
from typing import IO, BinaryIO, NamedTuple

from .project import SPEC_FILENAME


class ArchiveError(ValueError):
    """An archive we refuse; the message names the entry."""


class OverLimit(ArchiveError):
    """A folder or stream with more in it than its limits allow; the message says which limit."""


class ArchiveLimits(NamedTuple):
    max_files: int = 20_000
    max_unpacked_bytes: int = 2 * 1024**3
    max_ratio: float = 200.0  # unpacked / compressed, checked once past ratio_floor_bytes
    ratio_floor_bytes: int = 64 * 1024**2
    max_path_chars: int = 1024


DEFAULT_LIMITS = ArchiveLimits()


class ArchiveInfo(NamedTuple):
    files: int
    unpacked_bytes: int
    spec_bytes: bytes | None
    names: frozenset[str] = frozenset()


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


MAX_LINK_HOPS = 40  # as the kernel's limit on symlinks followed in one lookup


def _resolve(parts: list[str], links: dict[str, str], hops: int = 0) -> list[str] | None:
    """Where a path (components from the archive's top) leads once every symlink of the archive
    on the way is followed, as the file system would; None if it leaves the tree or loops."""
    stack: list[str] = []
    for i, part in enumerate(parts):
        if part in ("", "."):
            continue
        if part == "..":
            if not stack:
                return None
            stack.pop()
            continue
        stack.append(part)
        here = "/".join(stack)
        if here in links:
            hops += 1
            if hops > MAX_LINK_HOPS:
                return None
            stack.pop()
            rest = stack + links[here].split("/") + parts[i + 1 :]
            return _resolve(rest, links, hops)
    return stack


def _check_links(links: dict[str, str], hardlinks: dict[str, str], names: dict[str, str]) -> None:
    """Refuse links that lead out of the tree through other links, and entries under a symlink."""
    for name, target in links.items():
        parent = name.split("/")[:-1]
        if _resolve(parent + target.split("/"), links) is None:
            raise ArchiveError(f"entry {name!r}: symlink leads outside the project through other links ({target})")
    for name, _kind in names.items():
        parts = name.split("/")
        for depth in range(1, len(parts)):
            if "/".join(parts[:depth]) in links:
                raise ArchiveError(f"entry {name!r}: its path goes through a symlink ({'/'.join(parts[:depth])})")
    for name, target in hardlinks.items():
        if names.get(posixpath.normpath(target)) != "file":
            raise ArchiveError(f"entry {name!r}: hard link to {target!r}, which is not a file of the project")


def _open(source: Path | BinaryIO) -> tarfile.TarFile:
    if isinstance(source, Path):
        return tarfile.open(source, "r:gz")
    source.seek(0)
    return tarfile.open(fileobj=source, mode="r:gz")


def _member_kind(member: tarfile.TarInfo, limits: ArchiveLimits) -> tuple[str, str]:
    """One header checked on its own: its normalised name and kind ("file" | "dir" | "symlink" |
    "hardlink"); a long or unsafe path, a link out or with control characters, a special file: refused."""
    if len(member.name) > limits.max_path_chars:
        raise ArchiveError(f"entry {member.name[:80]!r}…: path longer than {limits.max_path_chars}")
    norm = _check_name(member.name)
    if member.issym() or member.islnk():
        _check_link(member, norm)
        if "\x00" in member.linkname or any(ord(c) < 32 for c in member.linkname):
            raise ArchiveError(f"entry {member.name!r}: link target contains a control character")
    elif not (member.isreg() or member.isdir()):
        raise ArchiveError(f"entry {member.name!r}: device files, FIFOs and other special files are not allowed")
    return norm, "symlink" if member.issym() else "hardlink" if member.islnk() else "dir" if member.isdir() else "file"


def inspect_archive(path: Path | BinaryIO, limits: ArchiveLimits = DEFAULT_LIMITS) -> ArchiveInfo:
    """Read every header of a gzipped tar once; refuse anything unsafe, return the build file."""
    compressed = max(path.stat().st_size if isinstance(path, Path) else os.fstat(path.fileno()).st_size, 1)
    files = 0
    total = 0
    spec_bytes: bytes | None = None
    names: set[str] = set()
    kinds: dict[str, str] = {}  # every entry: "file" | "dir" | "symlink" | "hardlink"
    links: dict[str, str] = {}
    hardlinks: dict[str, str] = {}
    try:
        with _open(path) as tar:
            for member in tar:
                files += 1
                if files > limits.max_files:
                    raise ArchiveError(f"archive has more than {limits.max_files} entries")
                norm, kind = _member_kind(member, limits)
                if norm in kinds and not (kind == "dir" == kinds[norm]):
                    raise ArchiveError(f"entry {member.name!r}: appears twice in the archive")
                kinds[norm] = kind
                if member.issym():
                    links[norm] = member.linkname
                elif member.islnk():
                    hardlinks[norm] = member.linkname
                total += member.size
                if total > limits.max_unpacked_bytes:
                    raise ArchiveError(f"archive unpacks to more than {limits.max_unpacked_bytes // 1024**2} MiB")
                if total > limits.ratio_floor_bytes and total / compressed > limits.max_ratio:
                    raise ArchiveError(
                        f"archive expands more than {limits.max_ratio:.0f}x (more than {limits.ratio_floor_bytes // 1024**2} MiB "
                        "from little: a file of zeros or filler?); leave such files out with .raiignore"
                    )
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
    _check_links(links, hardlinks, kinds)
    return ArchiveInfo(files=files, unpacked_bytes=total, spec_bytes=spec_bytes, names=frozenset(names))


def extract_archive(path: Path | BinaryIO, dest: Path, limits: ArchiveLimits = DEFAULT_LIMITS) -> ArchiveInfo:
    """Check the whole archive, then unpack it with ``safe_extract``."""
    info = inspect_archive(path, limits)
    dest.mkdir(parents=True, exist_ok=True)
    with _open(path) as tar:
        safe_extract(tar, dest)
    return info


def _inside(dest_real: str, path: str) -> bool:
    real = os.path.realpath(path)
    return real == dest_real or real.startswith(dest_real + os.sep)


def _source(
    tar: tarfile.TarFile, member: tarfile.TarInfo, base: str, dest_real: str, parent: str, target: str
) -> tuple[IO[bytes], int] | None:
    """Where a regular file's bytes come from, and how many: the archive; for a hard link, the file
    already unpacked here, linked when the file system allows (no bytes then: None) or else copied.
    None too when there is nothing to write (a link leading out, or to no regular file)."""
    if not member.islnk():
        src = tar.extractfile(member)
        return (src, member.size) if src is not None else None
    source = os.path.join(base, posixpath.normpath(member.linkname))
    if not _inside(dest_real, source) or os.path.islink(source) or not os.path.isfile(source):
        return None
    os.makedirs(parent, mode=0o755, exist_ok=True)
    try:  # the same file again: no bytes, as on the disk it came from
        os.link(source, target, follow_symlinks=False)
        return None
    except OSError:
        if os.path.lexists(target):
            return None
    return open(source, "rb"), os.path.getsize(source)  # noqa: SIM115 - the caller closes it


def safe_extract(tar: tarfile.TarFile, dest: Path, max_bytes: int | None = None, max_entries: int | None = None) -> int:
    """Unpack a tar (read in order, so also a stream) under ``dest`` and nowhere else: each
    entry's folder is resolved on disk and must lie inside ``dest``; files are created new with
    O_EXCL|O_NOFOLLOW, so never through a link; symlinks are made only when they resolve inside;
    hard links are made to a regular file already unpacked here (a copy only where the file system
    refuses a link); devices, FIFOs, owners and setuid bits are dropped. Entries that break a rule
    are skipped. Returns the bytes written. Past ``max_bytes`` (a file's whole size counts, so a
    sparse file is as big as it claims; a hard link adds nothing: 15,000 links to one 200 MB file
    were 3 TB of copies) or ``max_entries``, raises OverLimit: what was unpacked until then stays."""
    dest_real = os.path.realpath(dest)
    base = str(dest)  # file operations go through it: relative ("."), they need no access to dest's parents
    written = 0
    for count, member in enumerate(tar, 1):
        if max_entries is not None and count > max_entries:
            raise OverLimit(f"more than {max_entries} files and folders")
        try:
            norm = _check_name(member.name.removeprefix("./"))
        except ArchiveError:
            continue
        if norm in (".", ""):
            continue
        target = os.path.join(base, norm)
        parent = os.path.dirname(target)
        if not _inside(dest_real, parent):
            continue  # its folder is (or goes through) a link that leads elsewhere
        try:
            if member.isdir():
                os.makedirs(target, mode=0o755, exist_ok=True)
                if not _inside(dest_real, target):
                    continue
            elif member.issym():
                link = os.path.join(parent, member.linkname)
                if member.linkname.startswith("/") or not _inside(dest_real, link):
                    continue
                os.makedirs(parent, mode=0o755, exist_ok=True)
                os.symlink(member.linkname, target)
            elif member.isreg() or member.islnk():
                opened = _source(tar, member, base, dest_real, parent, target)
                if opened is None:
                    continue
                src, size = opened
                if max_bytes is not None and written + size > max_bytes:
                    raise OverLimit(f"more than {max_bytes // 1024**2} MiB ({member.name!r} would pass it)")
                os.makedirs(parent, mode=0o755, exist_ok=True)
                mode = 0o755 if member.mode & 0o111 else 0o644
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), mode)
                with src, os.fdopen(fd, "wb") as out:
                    while chunk := src.read(1024 * 1024):
                        out.write(chunk)
                written += size
        except OSError:
            continue  # exists already, or a link in the way: the entry is left out
    return written


# gzip level for build folders: a job's slot (and its GPU) waits for the packing. A 3 MB compiled
# binary packs 12x faster at 3 than at tarfile's default 9 for 4% more bytes (measured here).
BUILD_GZIP_LEVEL = 3


class TooSlow(OverLimit):
    """Packing went on past its deadline."""


class _Timed:
    """A file read for packing that stops the packing once its deadline has passed: one file can
    take most of the time (a 1 GiB file of random bytes takes ~30 s to compress here)."""

    def __init__(self, fh: IO[bytes], deadline: float, seconds: float):
        self.fh, self.deadline, self.seconds = fh, deadline, seconds

    def read(self, n: int = -1) -> bytes:
        if time.monotonic() > self.deadline:
            raise TooSlow(f"more than packing can do in {self.seconds:.0f} s")
        return self.fh.read(n)


def pack_directory(
    directory: Path, out: Path, max_bytes: int | None = None, max_entries: int | None = None, deadline: float | None = None
) -> int:
    """Tar+gzip a folder as is (the build folder coming back); returns the number of entries.
    Past ``max_entries`` entries or ``max_bytes`` of file sizes (as stat says: a sparse file counts
    whole, since that is what tar writes; a file with several hard links counts once, since tar
    writes it once), or past ``deadline`` (``time.monotonic()``), raises OverLimit (TooSlow for the
    deadline) and leaves no archive."""
    count, total = 0, 0
    seen: set[tuple[int, int]] = set()  # (device, inode) of files with more than one link, counted once
    seconds = (deadline - time.monotonic()) if deadline is not None else 0.0
    try:
        with tarfile.open(out, "w:gz", compresslevel=BUILD_GZIP_LEVEL) as tar:
            for root, dirs, filenames in os.walk(directory):
                for entry in sorted(dirs) + sorted(filenames):
                    full = Path(root) / entry
                    count += 1
                    if max_entries is not None and count > max_entries:
                        raise OverLimit(f"more than {max_entries} files and folders")
                    if deadline is not None and time.monotonic() > deadline:
                        raise TooSlow(f"more than packing can do in {seconds:.0f} s")
                    st = full.lstat()
                    if stat.S_ISREG(st.st_mode) and (st.st_nlink < 2 or (st.st_dev, st.st_ino) not in seen):
                        total += st.st_size
                        if st.st_nlink > 1:
                            seen.add((st.st_dev, st.st_ino))
                    if max_bytes is not None and total > max_bytes:
                        raise OverLimit(f"more than {max_bytes // 1024**2} MiB ({entry!r} would pass it)")
                    info = tar.gettarinfo(str(full), arcname=full.relative_to(directory).as_posix())
                    if info is None:  # a socket: tar has no word for it
                        continue
                    if info.isreg():  # a first link: its bytes, read against the deadline
                        with full.open("rb") as fh:
                            tar.addfile(info, _Timed(fh, deadline, seconds) if deadline is not None else fh)
                    else:
                        tar.addfile(info)
    except BaseException:
        out.unlink(missing_ok=True)
        raise
    return count
