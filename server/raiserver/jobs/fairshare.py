"""Fair share: waiting jobs stay in the database and are released to Celery only as workers have
free slots, round-robin across students.

Round-robin by last service: among students with waiting jobs, the one whose last job was
released longest ago (or never) goes next, with their oldest waiting job; then they go to the back.
A student with ten jobs therefore never delays a hundred students with one each: a waiting job sees
at most one job of any other student released per job of its own owner ahead of it. The same
order gives queue positions, so what a student is told is what will happen.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection
from datetime import datetime

from sqlalchemy import ColumnElement, func, or_, select
from sqlalchemy.orm import Session, joinedload

from raiprotocol.models import JobState
from raiserver.access.permissions import goes_first
from raiserver.fleet.workers import live_workers
from raiserver.store.tables import Job, User, Worker


def jumps_line(job: Job, staff_priority: bool, priority_kinds: Collection[str]) -> bool:
    """Released before fair share's turns: a job of a kind that goes first (RAI_PRIORITY_KINDS), or
    staff's (permissions.goes_first)."""
    return job.kind in priority_kinds or goes_first(job.owner, staff_priority)


def _priority(job: Job, staff_priority: bool, priority_kinds: set[str]) -> int:
    return 0 if jumps_line(job, staff_priority, priority_kinds) else 1


def fair_order(db: Session, queue: str, staff_priority: bool = True, priority_kinds: set[str] | None = None) -> list[Job]:
    """The queue's waiting (not yet released) jobs in the order they will be released."""
    waiting = db.scalars(
        select(Job)
        .options(joinedload(Job.owner))
        .where(Job.queue == queue, Job.state == JobState.queued, Job.released_at.is_(None))
        .order_by(Job.created_at, Job.id)
    ).all()
    if not waiting:
        return []
    owners = {j.owner_id for j in waiting}
    # each waiting student's last release: one probe of (owner_id, released_at) each (issue 52: a
    # GROUP BY over their jobs read every job they ever ran, the whole table at a deadline)
    last_release = select(func.max(Job.released_at)).where(Job.owner_id == User.id).scalar_subquery()
    last = {uid: at for uid, at in db.execute(select(User.id, last_release).where(User.id.in_(owners))) if at is not None}
    per_owner: dict[int, list[Job]] = {}
    for job in waiting:
        per_owner.setdefault(job.owner_id, []).append(job)
    # heap of each owner's next job: (priority, last service, that job's submission time, tiebreak)
    heap: list[tuple[int, tuple[int, float], datetime, str, int, int]] = []
    for owner, jobs in per_owner.items():
        served = last.get(owner)
        heapq.heappush(
            heap,
            (
                _priority(jobs[0], staff_priority, priority_kinds or set()),
                (1, served.timestamp()) if served else (0, 0.0),
                jobs[0].created_at,
                jobs[0].id,
                owner,
                0,
            ),
        )
    order: list[Job] = []
    tick = 0
    while heap:
        _, _, _, _, owner, i = heapq.heappop(heap)
        jobs = per_owner[owner]
        order.append(jobs[i])
        tick += 1
        if i + 1 < len(jobs):  # served now: to the back of the round
            nxt = jobs[i + 1]
            heapq.heappush(
                heap, (_priority(nxt, staff_priority, priority_kinds or set()), (2, float(tick)), nxt.created_at, nxt.id, owner, i + 1)
            )
    return order


def runs_on(live: list[Worker]) -> ColumnElement[bool]:
    """A job these workers run: it holds one of their slots (or reserved places) whatever its
    queue, since a worker serving several queues has one set of slots for all of them."""
    return (Job.state == JobState.running) & Job.worker.in_([w.name for w in live])


def free_slots(db: Session, queue: str, dead_after: float) -> tuple[int, int]:
    """(free slots, free reserved places) of the queue. Other jobs fill the live workers' slots;
    ranked runs (``Job.reserved``) have a place of their own on each live worker host (its reserved
    pool process, issue 32), so a ranked run is never held in the queue behind other jobs, and while
    it waits for its host to empty it holds none of the slots. Only runs the service builds and
    times take it: a student's ``exclusive: true`` runs alone but waits its turn on the slots.

    A worker serving several queues has one set of slots for all of them: what runs on the queue's
    workers counts whatever its queue (counted per queue, a worker of two queues had its slots
    handed out twice), and so do this queue's jobs released and not yet claimed."""
    live = live_workers(db, dead_after, queue)
    rows = db.execute(
        select(Job.reserved, func.count())
        .where(
            or_(
                runs_on(live),
                (Job.queue == queue) & (Job.state == JobState.queued) & Job.released_at.is_not(None),
            )
        )
        .group_by(Job.reserved)
    ).all()
    busy = {bool(alone): int(n) for alone, n in rows}
    return max(sum(w.slots for w in live) - busy.get(False, 0), 0), max(len(live) - busy.get(True, 0), 0)


def queues_with_work(db: Session) -> list[str]:
    return list(db.scalars(select(Job.queue).where(Job.state == JobState.queued).distinct()))
