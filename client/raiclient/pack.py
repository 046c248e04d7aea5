"""Packing a project folder for upload, honouring ``.raiignore`` (gitignore syntax); what the
server accepts is ``raiprotocol.archive``'s to say."""

from __future__ import annotations

import os
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pathspec

IGNORE_FILENAME = ".raiignore"
ALWAYS_IGNORED = [".git/", ".hg/", ".svn/"]


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
