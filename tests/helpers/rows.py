"""Rows of the service's database made directly, for unit tests of the rules that read them."""

from __future__ import annotations

from datetime import timedelta
from itertools import count

from sqlalchemy.orm import Session

from raiprotocol.models import JobState
from raiserver.store.db import utcnow
from raiserver.store.tables import Job, User, Worker

_ids = count(1)
SPEC = "rai:\n  version: 0.2\n  image: rai/busybox:latest\ncommands:\n  build:\n    - echo hi\n"


def add_user(db: Session, name: str, role: str = "student") -> User:
    user = User(username=name, role=role, access_key=f"key-{name}", secret_hash="x")
    db.add(user)
    db.commit()
    return user


def add_job(db: Session, owner: User, queue: str = "gpu", kind: str = "dev", seconds_ago: float = 0.0, reserved: bool = False) -> Job:
    n = next(_ids)
    job = Job(
        id=f"J{n:025d}",
        owner_id=owner.id,
        queue=queue,
        kind=kind,
        state=JobState.queued,
        image="rai/busybox:latest",
        spec_yaml=SPEC,
        archive_sha256="0" * 64,
        created_at=utcnow() - timedelta(seconds=seconds_ago),
        reserved=reserved,
    )
    db.add(job)
    db.commit()
    return job


def add_worker(
    db: Session,
    name: str = "w1",
    queues: tuple[str, ...] = ("gpu",),
    slots: int = 1,
    images: list[str] | None = None,
    seconds_ago: float = 0.0,
) -> Worker:
    w = Worker(
        name=name, queues=list(queues), executor="docker", slots=slots, images=images, last_seen=utcnow() - timedelta(seconds=seconds_ago)
    )
    db.add(w)
    db.commit()
    return w
