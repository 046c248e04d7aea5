"""Issue 51: on SQLite the server's memory grew with every job (about 15 KB a job with one student
submitting, 45 KB in a soak of ten): each connection the pool keeps had a page cache of SQLite's default
size (2 MiB) that filled with the jobs table as requests read it (the late days' sum and the ETA's
recent runs read the whole table), so the memory followed the table's size up to 2 MiB times the
pool. The caches are small now: what a connection holds no longer grows with the jobs.

Measured as SQLite counts its own allocations (``sqlite3_memory_used``), in this process: no RSS
threshold, which the allocator's whims and the rest of the test run would make flaky."""

from __future__ import annotations

import ctypes
import sqlite3
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
from helpers.rows import SPEC, add_user
from sqlalchemy import Engine, insert, text

from raiprotocol.models import JobState
from raiserver.store.db import Database, migrate, utcnow
from raiserver.store.tables import Job

CONNECTIONS = 4  # pooled connections reading at once, as under a few students' requests


def sqlite_memory() -> Callable[[], int]:
    """``sqlite3_memory_used`` of the SQLite library that Python's sqlite3 module runs on (the same
    loaded library, found in this process's maps); skips where that module carries its own copy."""
    sqlite3.connect(":memory:").close()  # the module and its library are loaded
    paths = {line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines() if "libsqlite3.so" in line}
    if len(paths) != 1:
        pytest.skip(f"Python's sqlite3 is not linked to one shared libsqlite3 here ({paths or 'none'})")
    used = ctypes.CDLL(paths.pop()).sqlite3_memory_used
    used.restype = ctypes.c_int64
    return lambda: int(used())


def fill(engine: Engine, owner_id: int, start: int, n: int) -> None:
    """``n`` finished jobs of about 1.5 KB each, as a term's history (a build file, a message)."""
    now = utcnow()
    rows = [
        {
            "id": f"M{i:025d}",
            "owner_id": owner_id,
            "queue": "gpu",
            "kind": "dev",
            "state": JobState.succeeded,
            "image": "rai/busybox:latest",
            "spec_yaml": SPEC + "# " + "x" * 1200 + "\n",
            "archive_sha256": f"{i:064x}",
            "created_at": now - timedelta(seconds=60),
            "started_at": now - timedelta(seconds=50),
            "finished_at": now - timedelta(seconds=40),
            "message": "the job ended",
        }
        for i in range(start, start + n)
    ]
    with engine.begin() as conn:
        conn.execute(insert(Job), rows)


def read_the_table(engine: Engine) -> None:
    """Every connection reads the whole jobs table at once, each in a read transaction of its own."""
    conns = [engine.connect() for _ in range(CONNECTIONS)]
    try:
        for conn in conns:
            assert conn.execute(text("SELECT sum(length(spec_yaml)) FROM jobs")).scalar()
    finally:
        for conn in conns:
            conn.close()


def test_what_pooled_connections_hold_does_not_grow_with_the_jobs_table(tmp_path: Path) -> None:
    used = sqlite_memory()
    database = Database(f"sqlite:///{tmp_path / 'term.sqlite3'}")
    migrate(database.engine)
    with database.session() as db:
        owner = add_user(db, "student").id
    fill(database.engine, owner, 0, 200)  # 0.3 MB of jobs
    read_the_table(database.engine)
    before = used()
    fill(database.engine, owner, 200, 1000)  # six times as many: 1.8 MB, under SQLite's default cache
    read_the_table(database.engine)
    grew = used() - before
    database.engine.dispose()
    # SQLite's default cache (2 MiB a connection) held all of it: ~1.5 MB more per connection, 6 MB
    assert grew < 512 * 1024, f"the pool's connections hold {grew / 1024:.0f} KiB more for a jobs table six times as large"
