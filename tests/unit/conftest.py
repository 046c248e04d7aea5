"""The unit tier: the server's rules on an in-process SQLite database, in seconds."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from itertools import count

import pytest
from sqlalchemy.orm import Session

from raiprotocol.models import JobState
from raiserver.config import Settings
from raiserver.db import Database, migrate, utcnow
from raiserver.jobs import Services
from raiserver.logs import LogStore
from raiserver.storage import Storage
from raiserver.tables import Job, User, Worker

_ids = count(1)
SPEC = "rai:\n  version: 0.2\n  image: rai/busybox:latest\ncommands:\n  build:\n    - echo hi\n"


@pytest.fixture
def db(tmp_path) -> Iterator[Session]:
    database = Database(f"sqlite:///{tmp_path / 'unit.sqlite3'}")
    migrate(database.engine)
    with database.session() as session:
        yield session
    database.engine.dispose()


def add_user(db: Session, name: str, role: str = "student") -> User:
    user = User(username=name, role=role, access_key=f"key-{name}", secret_hash="x")
    db.add(user)
    db.commit()
    return user


def add_job(db: Session, owner: User, queue: str = "gpu", kind: str = "dev", seconds_ago: float = 0.0) -> Job:
    n = next(_ids)
    job = Job(id=f"J{n:025d}", owner_id=owner.id, queue=queue, kind=kind, state=JobState.queued, image="rai/busybox:latest",
              spec_yaml=SPEC, archive_sha256="0" * 64, created_at=utcnow() - timedelta(seconds=seconds_ago))
    db.add(job)
    db.commit()
    return job


def add_worker(db: Session, name: str = "w1", queues: tuple[str, ...] = ("gpu",), slots: int = 1,
               images: list[str] | None = None, seconds_ago: float = 0.0) -> Worker:
    w = Worker(name=name, queues=list(queues), executor="docker", slots=slots, images=images,
               last_seen=utcnow() - timedelta(seconds=seconds_ago))
    db.add(w)
    db.commit()
    return w


@pytest.fixture
def services(redis_url, tmp_path) -> Iterator[Services]:
    """The server's services on this test's own storage; Redis is the session's (job ids are unique)."""
    storage = Storage(tmp_path / "storage")
    settings = Settings(max_attempts=2, worker_dead_after=45)
    logs = LogStore(redis_url, storage, ttl=60)
    kicks: list[int] = []
    svc = Services(settings=settings, storage=storage, logs=logs, dispatcher=None,  # type: ignore[arg-type]
                   kick=lambda: kicks.append(1))
    yield svc
    logs.redis.close()
