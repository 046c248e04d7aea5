"""What a job and the queues look like to the people reading them, computed here once: a
waiting job's position (the fair-share order, so it is what will happen) and its ETA, a job as the
API shows it, the web queue's rows and ``raiclient queue``'s summaries. Nothing here changes a job
(``lifecycle`` does)."""

from __future__ import annotations

import heapq
from collections import Counter
from datetime import timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session, joinedload

from raiprotocol.models import JobOut, JobResultSummary, JobState, QueueSummary
from raiprotocol.states import UNFINISHED
from raiserver.access.auth import Principal
from raiserver.config import Settings
from raiserver.fleet.workers import live_slots, live_workers
from raiserver.grading.kinds import Deadlines, in_words
from raiserver.jobs.fairshare import fair_order
from raiserver.jobs.lifecycle import claimed_at, phases_of
from raiserver.store.db import utcnow
from raiserver.store.tables import Job, User

TYPICAL_RUN = 30.0  # seconds, for a queue that has no finished job yet


class QueueView:
    """Queue positions and ETAs, computed once per queue however many jobs are shown (the web
    queue renders every waiting job each second: one fair-order pass, not one per job)."""

    def __init__(self, db: Session, settings: Settings):
        self.db = db
        self.settings = settings
        self._positions: dict[str, dict[str, int]] = {}
        self._per_slot: dict[str, float | None] = {}  # a typical run on the queue
        self._frees: dict[str, list[float]] = {}  # when each of its slots frees, seconds from now
        self._deadlines: Deadlines | None = None

    def late(self, job: Job) -> str | None:
        """How late the job was submitted after its owner's own deadline, in words; None when on time."""
        if self._deadlines is None:
            self._deadlines = Deadlines(self.db, self.settings)
        late = self._deadlines.late_by(job)
        if late is None:
            return None
        return f"late by {in_words(late)}" + (" (late days)" if self._deadlines.counts(job) else "")

    def position(self, job: Job) -> int | None:
        """1 = next to be released to a worker; the fair-share order, so it is what will happen."""
        if job.state != JobState.queued:
            return None
        if job.released_at is not None:
            return 1
        if job.queue not in self._positions:
            s = self.settings
            order = fair_order(self.db, job.queue, s.staff_priority, set(s.priority_kinds))
            self._positions[job.queue] = {j.id: i for i, j in enumerate(order, start=1)}
        return self._positions[job.queue].get(job.id)

    def eta(self, job: Job, position: int | None) -> float | None:
        """Expected wait until the job starts: when each slot of its queue frees (from what runs
        there now: how long it has run, against a typical run and its time limit), then the jobs
        ahead each taking a typical run. Rounded to 5 s (an estimate, not a promise). None when no
        live worker serves the queue."""
        if position is None:
            return None
        if job.queue not in self._per_slot:
            self._frees[job.queue], self._per_slot[job.queue] = self._schedule(job.queue)
        typical, frees = self._per_slot[job.queue], list(self._frees[job.queue])
        if typical is None or not frees:
            return None
        heapq.heapify(frees)
        for _ in range(position - 1):
            heapq.heappush(frees, heapq.heappop(frees) + typical)
        return float(5 * round(frees[0] / 5))

    def _schedule(self, queue: str) -> tuple[list[float], float | None]:
        slots = live_slots(self.db, queue, self.settings.worker_dead_after)
        if slots == 0:
            return [], None
        recent = self.db.execute(
            select(Job.started_at, Job.finished_at).where(Job.queue == queue, Job.finished_at.is_not(None),
                                                          Job.started_at.is_not(None))
            .order_by(Job.finished_at.desc()).limit(20)
        ).all()
        spans = sorted((f - s).total_seconds() for s, f in recent if s is not None and f is not None)
        typical = spans[len(spans) // 2] if spans else TYPICAL_RUN
        now, wall = utcnow(), float(self.settings.wall_seconds)
        frees = []
        for running in self.db.scalars(select(Job).where(Job.queue == queue, Job.state == JobState.running, Job.waiting.is_(None))):
            claimed = claimed_at(running)
            ran = (now - claimed).total_seconds() if claimed else 0.0
            # within a typical run: the rest of it; past it, half again what it ran, never past its limit
            frees.append(max(typical - ran, 1.0) if ran < typical else max(min(wall - ran, max(ran * 0.5, 10.0)), 1.0))
        frees = sorted(frees) + [0.0] * max(slots - len(frees), 0)  # idle slots free now
        return frees, typical


def shown_state(state: JobState, waiting: bool) -> JobState:
    """What users see: a job a worker handed to Slurm that Slurm has not started yet is queued
    (the database keeps it running: it is claimed, and cancelling it must reach that worker)."""
    return JobState.queued if state is JobState.running and waiting else state


def job_out(db: Session, job: Job, view: QueueView) -> JobOut:
    position = view.position(job)
    return JobOut(
        id=job.id,
        owner=job.owner.username,
        queue=job.queue,
        kind=job.kind,
        state=shown_state(job.state, bool(job.waiting)),
        waiting=job.waiting,
        image=job.image,
        created_at=job.created_at,
        released_at=job.released_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
        worker=job.worker,
        exit_code=job.exit_code,
        failed_command=job.failed_command,
        message=job.message,
        position=position,
        eta_seconds=view.eta(job, position),
        gpu_name=job.gpu_name,
        has_build=job.has_build,
        archive_bytes=job.archive_bytes,
        results=JobResultSummary.model_validate(job.results) if job.results else None,
        phases=phases_of(job),
        late=view.late(job),
    )


def summaries(db: Session, settings: Settings, user: User) -> list[QueueSummary]:
    dead_after = settings.worker_dead_after
    counts: Counter[tuple[str, JobState]] = Counter()
    held = Job.waiting.is_not(None)  # claimed, but still waiting in Slurm: shown as waiting
    for queue, state, waits, n in db.execute(select(Job.queue, Job.state, held, func.count()).where(
            Job.state.in_(UNFINISHED)).group_by(Job.queue, Job.state, held)):
        counts[queue, shown_state(state, waits)] += n
    live = live_workers(db, dead_after)
    served = {q for w in live for q in (w.queues or [])}
    view = QueueView(db, settings)
    mine = db.scalars(select(Job).where(Job.owner_id == user.id,
                                        Job.state.in_(UNFINISHED)).order_by(Job.created_at)).all()
    # answering: alive, and heard from within a few heartbeats (a killed worker is silent long
    # before it is declared dead)
    recent = utcnow() - timedelta(seconds=2.5 * settings.heartbeat_seconds)
    answering = {w.name for w in live if w.last_seen >= recent}
    unanswered: Counter[str] = Counter(q for q, worker in db.execute(select(Job.queue, Job.worker).where(
        Job.state == JobState.running, Job.waiting.is_(None))) if worker not in answering)
    out = []
    for queue in sorted(served | {q for q, _ in counts} | {j.queue for j in mine}):
        serving = [w for w in live if queue in (w.queues or [])]
        out.append(QueueSummary(queue=queue, waiting=counts[queue, JobState.queued], running=counts[queue, JobState.running],
                                slots=sum(w.slots for w in serving), workers=len(serving),
                                mine=[job_out(db, j, view) for j in mine if j.queue == queue],
                                unanswered=unanswered[queue], dead_after=dead_after))
    return out


def queue_rows(db: Session, settings: Settings) -> dict[str, list[dict]]:
    """Every waiting and running job, as staff see it (``owner_id`` to tell whose it is)."""
    jobs = db.scalars(
        select(Job).options(joinedload(Job.owner))
        .where(Job.state.in_(UNFINISHED)).order_by(Job.created_at)
    ).all()
    now = utcnow()
    rows: dict[str, list[dict]] = {"queued": [], "running": []}
    view = QueueView(db, settings)
    for job in jobs:
        out = job_out(db, job, view)
        since = job.started_at if out.state is JobState.running else job.created_at
        rows[out.state.value].append({
            "id": job.id, "owner": job.owner.username, "owner_id": job.owner_id, "queue": job.queue, "kind": job.kind,
            "image": job.image, "worker": job.worker or "", "position": out.position, "eta": out.eta_seconds,
            "waiting": job.waiting,
            "seconds": round((now - since).total_seconds()) if since else 0,
        })
    rows["queued"].sort(key=lambda r: (r["position"] is None, r["position"] or 0, r["queue"]))  # who goes next first
    return rows


def shown_to(rows: dict[str, list[dict]], user_id: int, staff: bool) -> dict[str, list[dict]]:
    """The queue as one user may see it: others' jobs anonymous to students."""
    view: dict[str, list[dict]] = {}
    for state, jobs in rows.items():
        view[state] = []
        for row in jobs:
            mine = row["owner_id"] == user_id
            shown = staff or mine
            view[state].append({**{k: v for k, v in row.items() if k != "owner_id"}, "mine": mine,
                                "id": row["id"] if shown else None, "owner": row["owner"] if shown else "another student"})
    return view


def queue_snapshot(db: Session, settings: Settings, p: Principal) -> dict:
    return shown_to(queue_rows(db, settings), p.user.id, p.is_staff)
