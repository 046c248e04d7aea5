"""A delivery's place on its host: one of the host's slots, or the one reserved place of ranked
runs (issue 32).

A shared job takes a slot; a ranked run (the server's own lane: ``exclusive`` in the message) takes
the reserved place, else a slot, so deliveries never outnumber what the host offers, however many
messages the server handed out. The pool has a process per slot and one more
(``WorkerRuntime.processes``), so a ranked run is claimed and waits for the host at once, holding
no slot, while every slot runs a job. A delivery that finds no place of its kind free within a few
seconds claims nothing: its task is tried again a moment later, on any host. Places are lock files
(``flock``), so a pool process that dies lets its place go with it.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

RESERVED = "place.reserved.lock"


def _slot(k: int) -> str:
    return f"place.{k}.lock"


def _grab(lock_dir: Path, name: str) -> int | None:
    fd = os.open(lock_dir / name, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


@contextmanager
def place(lock_dir: Path, slots: int, exclusive: bool, wait: float = 5.0) -> Iterator[str | None]:
    """Hold a place for one delivery until the block ends: its name, or None when every place the
    delivery may take stayed held for ``wait`` seconds (shared jobs: the slots; exclusive runs:
    the reserved place, then a slot). The wait covers the common case: the server releases the next
    job as soon as the last one's end is reported, a moment before its process lets its place go."""
    lock_dir.mkdir(parents=True, exist_ok=True)
    names = ([RESERVED] if exclusive else []) + [_slot(k) for k in range(max(slots, 1))]
    fd, held = None, None
    deadline = time.monotonic() + wait
    while held is None:
        for name in names:
            fd = _grab(lock_dir, name)
            if fd is not None:
                held = name
                break
        if held is None:
            if time.monotonic() >= deadline:
                break
            time.sleep(0.02)
    try:
        yield held
    finally:
        if fd is not None:
            os.close(fd)
