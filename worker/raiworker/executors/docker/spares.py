"""Spare containers: once a job's end is reported its slot (the worker process that ran it) starts
the next container ahead of time, for the same image, GPUs and memory limit: a fresh container per
job, made after the previous one was killed, never reused. Its /src is the slot's own folder, empty
until the next job's files are moved in (``_move_entries``) and emptied when the job ends (``_empty``).
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from docker.errors import DockerException

from ..base import JobContext
from .client import _remove_later

SpareKey = tuple[str, tuple[str, ...], int]  # image, GPU ids, memory limit


def spare_key(ctx: JobContext) -> SpareKey:
    """What a container is made for: a spare serves only a job that needs the same."""
    return ctx.image, tuple(ctx.gpu_ids), ctx.memory_mb


@dataclass(frozen=True)
class _Spare:
    """A container started ahead of time for this slot's next job, and what it was made for."""

    key: SpareKey
    container: Any
    src: Path  # the slot's folder, bound read-only at /src


class _Slot:
    """This process's spare container (a Celery pool process runs one job at a time)."""

    def __init__(self) -> None:
        self.spare: _Spare | None = None
        self.making: threading.Thread | None = None

    def take(self, key: SpareKey) -> _Spare | None:
        """The spare if it was made for this job and still runs; any other is removed."""
        if self.making is not None:
            self.making.join(60)
            self.making = None
        spare, self.spare = self.spare, None
        if spare is None:
            return None
        try:
            spare.container.reload()
            if spare.key == key and spare.container.status == "running":
                return spare
        except DockerException:
            pass
        _remove_later(spare.container)
        return None

    def prepare(self, make: Callable[[], _Spare], then: Callable[[], None] = lambda: None) -> None:
        """Make the next container in the background; ``then`` (the last job's container's removal)
        only once it is made: the engine doing both at once made the spare late for a job that
        followed at once (issue 38)."""

        def run() -> None:
            try:
                self.spare = make()
            except Exception:  # noqa: BLE001 - no spare: the next job starts its own container
                self.spare = None
            finally:
                then()

        self.making = threading.Thread(target=run, name="spare-container", daemon=True)
        self.making.start()


_slot = _Slot()


def _move_entries(src: Path, dest: Path) -> bool:
    """Move the project's top-level entries (renames: links are moved, never followed); on
    failure (another file system) put them back and say so."""
    moved: list[str] = []
    try:
        for entry in src.iterdir():
            entry.rename(dest / entry.name)
            moved.append(entry.name)
        return True
    except OSError:
        for name in moved:
            (dest / name).rename(src / name)
        return False


def _empty(folder: Path) -> bool:
    """Remove everything in the folder (links are removed, never followed); True if it is empty."""
    for entry in folder.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
    return not any(folder.iterdir())
