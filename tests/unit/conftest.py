"""The unit tier: the server's rules on an in-process SQLite database, in seconds."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy.orm import Session

from raiserver.config import Settings
from raiserver.live.logs import LogStore
from raiserver.parts import Services
from raiserver.store.db import Database, migrate
from raiserver.store.redisconn import RedisService
from raiserver.store.storage import Storage


@pytest.fixture(autouse=True)
def fresh_schedules() -> Iterator[None]:
    """Each test's queue starts without a schedule made by another's (a process keeps one per queue
    for a second: ``jobs.views.Schedule``)."""
    from raiserver.jobs import views

    views._SCHEDULES.clear()
    yield
    views._SCHEDULES.clear()


@pytest.fixture
def db(tmp_path) -> Iterator[Session]:
    database = Database(f"sqlite:///{tmp_path / 'unit.sqlite3'}")
    migrate(database.engine)
    with database.session() as session:
        yield session
    database.engine.dispose()


@pytest.fixture
def services(redis_url, tmp_path) -> Iterator[Services]:
    """The server's services on this test's own storage; Redis is the session's (job ids are unique)."""
    storage = Storage(tmp_path / "storage")
    settings = Settings(max_attempts=2, worker_dead_after=45)
    redis_service = RedisService(redis_url)
    logs = LogStore(redis_service, storage, ttl=60)
    kicks: list[int] = []
    svc = Services(
        settings=settings,
        storage=storage,
        redis=redis_service,
        logs=logs,
        dispatcher=None,  # type: ignore[arg-type]
        kick=lambda: kicks.append(1),
    )
    yield svc
    redis_service.sync.close()
