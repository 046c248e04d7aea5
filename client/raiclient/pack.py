"""Packing a project folder for upload, honouring ``.raiignore`` (gitignore syntax); what the
server accepts is ``raiprotocol.archive``'s to say."""

from __future__ import annotations

import os
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

IGNORE_FILENAME = ".raiignore"
VCS_DIRS = (".git", ".hg", ".svn")
ALWAYS_IGNORED = [f"{d}/" for d in VCS_DIRS]


@dataclass(frozen=True)
class PackedProject:
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


def pack_project(project: Path, dest_dir: Path | None = None) -> PackedProject:
    """Tar+gzip a project folder, honouring ``.raiignore`` (gitignore syntax)."""
    project = project.resolve()
    ignored, applied = _ignored(project)
    fd, name = tempfile.mkstemp(prefix="rai-upload-", suffix=".tar.gz", dir=dest_dir)
    os.close(fd)
    files = 0
    with tarfile.open(name, "w:gz", compresslevel=6) as tar:
        for root, dirs, filenames in os.walk(project):
            rel_root = Path(root).relative_to(project)
            kept_dirs = []
            for d in sorted(dirs):
                rel = (rel_root / d).as_posix()
                if not ignored(rel + "/"):
                    kept_dirs.append(d)
            dirs[:] = kept_dirs
            for d in kept_dirs:
                full = Path(root) / d
                if full.is_symlink():
                    tar.add(full, arcname=(rel_root / d).as_posix(), recursive=False)
                    files += 1
            for f in sorted(filenames):
                rel = (rel_root / f).as_posix()
                if ignored(rel):
                    continue
                tar.add(Path(root) / f, arcname=rel, recursive=False)
                files += 1
    return PackedProject(Path(name), files, Path(name).stat().st_size, applied)
