"""What each queue holds, as ``raiclient queue`` shows it: jobs waiting and running, the live
workers and slots serving it, the running jobs on workers that stopped answering, and the asking
user's own jobs with their positions."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from raiprotocol.models import JobState, QueueSummary
from raiprotocol.states import UNFINISHED
from raiserver.config import Settings
from raiserver.fleet.workers import live_workers
from raiserver.jobs.lifecycle import QueueView, job_out, shown_state
from raiserver.store.db import utcnow
from raiserver.store.tables import Job, User


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
