"""Fair share: waiting jobs stay in the database and are released to Celery only as workers have
free slots, round-robin across students.

Each waiting job gets a round: how many jobs its owner already has running or released, plus its
place among the owner's waiting jobs. Jobs leave in order of (priority, round, submission time),
so a student with ten jobs never delays a hundred students with one each: nobody waits behind more
than one job of any other student. The same order gives queue positions, so what a student is
told is what will happen.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session, joinedload

from raiclient.models import JobState

from .db import utcnow
from .tables import Job, Worker

STALE_DISPATCH = timedelta(seconds=120)  # released but never claimed (message lost): release again


def _priority(job: Job, staff_priority: bool, priority_kinds: set[str]) -> int:
    if job.kind in priority_kinds:
        return 0
    if staff_priority and job.owner.role in ("ta", "instructor", "admin"):
        return 0
    return 1


def fair_order(db: Session, queue: str, staff_priority: bool = True, priority_kinds: set[str] | None = None) -> list[Job]:
    """The queue's waiting (not yet released) jobs in the order they will be released."""
    active = Counter(
        db.scalars(
            select(Job.owner_id).where(
                Job.queue == queue,
                or_(Job.state == JobState.running.value,
                    (Job.state == JobState.queued.value) & Job.dispatched_at.is_not(None)),
            )
        ).all()
    )
    waiting = db.scalars(
        select(Job).options(joinedload(Job.owner))
        .where(Job.queue == queue, Job.state == JobState.queued.value, Job.dispatched_at.is_(None))
        .order_by(Job.created_at, Job.id)
    ).all()
    seen: Counter[int] = Counter()
    keyed = []
    for job in waiting:
        rnd = active[job.owner_id] + seen[job.owner_id]
        seen[job.owner_id] += 1
        keyed.append(((_priority(job, staff_priority, priority_kinds or set()), rnd, job.created_at, job.id), job))
    keyed.sort(key=lambda kv: kv[0])
    return [job for _, job in keyed]


def free_slots(db: Session, queue: str, dead_after: float) -> int:
    cutoff = utcnow() - timedelta(seconds=dead_after)
    slots = sum(w.slots for w in db.scalars(select(Worker).where(Worker.last_seen > cutoff)) if queue in (w.queues or []))
    busy = db.scalar(
        select(func.count()).select_from(Job).where(
            Job.queue == queue,
            or_(Job.state == JobState.running.value,
                (Job.state == JobState.queued.value) & Job.dispatched_at.is_not(None)),
        )
    )
    return max(slots - int(busy or 0), 0)


def queues_with_work(db: Session) -> list[str]:
    return list(db.scalars(select(Job.queue).where(Job.state == JobState.queued.value).distinct()))


def release_stale(db: Session) -> int:
    """A released job nobody claimed for long (its Celery message was lost): release it again
    under a new attempt number, so the lost message, should it reappear, is refused."""
    cutoff = utcnow() - STALE_DISPATCH
    stale = db.scalars(
        select(Job).where(Job.state == JobState.queued.value, Job.dispatched_at.is_not(None), Job.dispatched_at < cutoff)
    ).all()
    for job in stale:
        job.attempt += 1
        job.dispatched_at = None
    db.commit()
    return len(stale)


def dispatch(db: Session, send, dead_after: float, staff_priority: bool = True, priority_kinds: set[str] | None = None) -> int:
    """Release as many jobs as there are free slots, in fair order. ``send(job)`` hands one to Celery."""
    released = 0
    for queue in queues_with_work(db):
        free = free_slots(db, queue, dead_after)
        if free <= 0:
            continue
        for job in fair_order(db, queue, staff_priority, priority_kinds)[:free]:
            job.dispatched_at = utcnow()
            db.commit()  # durable before the message exists: a crash here leaves it for release_stale
            send(job)
            released += 1
    return released
