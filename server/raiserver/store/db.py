"""Database engine, sessions and migrations (Alembic runs at start, so a new server is ready)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import DateTime, Engine, create_engine, event, exc, text
from sqlalchemy.engine import Dialect
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker
from sqlalchemy.pool import ConnectionPoolEntry
from sqlalchemy.types import TypeDecorator

HERE = Path(__file__).parent.parent  # raiserver/, where the migrations live


class UTCDateTime(TypeDecorator[datetime]):
    """Always timezone-aware UTC, also on SQLite which forgets the zone."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return value


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


# A transaction that ends a job commits within this of the finished_at it writes (the log is stored
# between: seconds, minutes for the largest). What a process keeps of ended jobs (the boards, the
# grade sheets, /metrics' histograms: issue 52) counts a job once it ended this long ago, and reads
# the jobs that ended since at each look, so a slow commit is never missed.
SETTLE = timedelta(minutes=10)


class Base(DeclarativeBase):
    pass


# A SQLite connection's own page cache, in KiB. SQLite's default, 2 MiB a connection, filled with
# the jobs table as requests read it (the late days' sum and the ETA's recent runs read all of it),
# in each of the pool's connections: the server's memory grew with every job (issue 51: 15 KB a
# job with one student submitting, 45 KB in a soak of ten) up to 2 MiB times the pool, and the
# caches, emptied whenever another connection writes (WAL) and filled again from whichever thread,
# fragmented malloc's arenas on top. The kernel's page cache holds the file for every connection
# anyway: with this one, jobs take as long and memory stays flat (bench/server-memory.txt).
SQLITE_CACHE_KIB = 256


# How long a statement waits for a row lock before it fails (a 503 the caller may retry): without a
# bound, a request waiting on a lock that a request still running holds (an import of the roster,
# its commit waiting for a thread that the waiters hold) could wait for ever, and so could every
# thread behind it (the hostile review of 2026-11-29). Waits of a healthy server are milliseconds.
LOCK_TIMEOUT_MS = 10_000


def make_engine(url: str, pool_size: int = 10, max_overflow: int = 20, lock_timeout_ms: int = LOCK_TIMEOUT_MS) -> Engine:
    """``pool_size``/``max_overflow``: PostgreSQL's connections (SQLite allows 10 more overflow)."""
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(
            url, connect_args={"check_same_thread": False, "timeout": 30}, pool_size=pool_size, max_overflow=max_overflow + 10
        )

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(conn: DBAPIConnection, _record: ConnectionPoolEntry) -> None:  # WAL: readers never block the writer
            cur = conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.execute(f"PRAGMA cache_size=-{SQLITE_CACHE_KIB}")  # negative: KiB, not pages
            cur.close()

        return engine
    engine = create_engine(url, pool_pre_ping=True, pool_size=pool_size, max_overflow=max_overflow)

    @event.listens_for(engine, "connect")
    def _lock_timeout(conn: DBAPIConnection, _record: ConnectionPoolEntry) -> None:
        # a SET on each new connection, not libpq's startup "options" (PgBouncer refuses those)
        autocommit = conn.autocommit
        conn.autocommit = True
        cur = conn.cursor()
        cur.execute(f"SET lock_timeout = {int(lock_timeout_ms)}")
        cur.close()
        conn.autocommit = autocommit

    return engine


# What the database being out of reach raises, as SQLAlchemy wraps it: the driver's OperationalError
# (refused, reset, shut down, timed out), any DBAPI error that cost the connection, a connection
# lost mid-use, or no connection free in the pool in time.
AWAY_TYPES: tuple[type[Exception], ...] = (exc.DBAPIError, exc.DisconnectionError, exc.TimeoutError)


def away(error: Exception) -> bool:
    """Whether ``error`` is the database being away (passing: a 503 and a retry), not a query's
    own fault (a bug: a 500). Checked on AWAY_TYPES, which the app's one handler catches."""
    if isinstance(error, exc.DBAPIError):
        return isinstance(error, exc.OperationalError) or error.connection_invalidated
    return isinstance(error, (exc.DisconnectionError, exc.TimeoutError))


MIGRATION_LOCK = 0x7261692D6D6967  # "rai-mig": the PostgreSQL advisory lock migrations take


def migrate(engine: Engine) -> None:
    """Bring the schema to the head revision. Every server process calls this as it starts (four
    at once under compose): on PostgreSQL they take turns on an advisory lock held to the end of
    the transaction, so one migrates and the others find the schema done (without it they raced
    to create the same tables). SQLite serialises writers itself."""
    cfg = Config()
    cfg.set_main_option("script_location", str(HERE / "migrations"))
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":  # another process's migration may take longer than a row lock's bound
            conn.execute(text("SET LOCAL lock_timeout = 0"))
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


class Database:
    def __init__(self, url: str, pool_size: int = 10, max_overflow: int = 20, lock_timeout_ms: int = LOCK_TIMEOUT_MS):
        self.url = url
        self.engine = make_engine(url, pool_size, max_overflow, lock_timeout_ms)
        self.sessionmaker = sessionmaker(self.engine, expire_on_commit=False)

    @contextmanager
    def session(self) -> Iterator[Session]:
        with self.sessionmaker() as s:
            try:
                yield s
                s.commit()
            except BaseException:
                s.rollback()
                raise
