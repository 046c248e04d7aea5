"""Per-student limits: jobs waiting or running at once, submissions per minute and per day, GPU
minutes per day; ``limits_of`` shows each, used and left, to the student. Over a limit: HTTP 429
with Retry-After and one sentence the client prints as is."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from raiprotocol.models import Limits
from raiprotocol.spec import CourseSpec
from raiprotocol.states import UNFINISHED
from raiserver.access.permissions import exempt_from_limits
from raiserver.config import Settings
from raiserver.errors import OverQuota
from raiserver.grading.kinds import Deadlines
from raiserver.store.db import utcnow
from raiserver.store.tables import Job, User


def check_quotas(db: Session, user: User, settings: Settings) -> None:
    """Raise OverQuota (429) if this user may not submit now. Called before the upload is read, and again,
    with the user's row locked, when the job is created (so two racing uploads cannot both pass)."""
    if exempt_from_limits(user, settings):
        return
    theirs = (Job.owner_id == user.id, Job.remeasure_of.is_(None))  # staff's re-measures of their runs are not theirs to count
    active = db.scalars(select(Job.id).where(*theirs, Job.state.in_(UNFINISHED)).order_by(Job.created_at)).all()
    if len(active) >= settings.max_active_jobs:
        ids = ", ".join(active[:5])
        raise OverQuota(f"You already have {len(active)} jobs in the queue ({ids}); wait for one to finish or cancel it", 30)
    now = utcnow()
    recent = db.scalars(select(Job.created_at).where(*theirs, Job.created_at > now - timedelta(minutes=1)).order_by(Job.created_at)).all()
    if len(recent) >= settings.submissions_per_minute:
        wait = math.ceil((recent[0] + timedelta(minutes=1) - now).total_seconds())
        raise OverQuota(
            f"You submitted {len(recent)} jobs in the last minute (the limit is {settings.submissions_per_minute}); try again in {wait} s",
            wait,
        )
    if settings.submissions_per_day > 0:
        today = db.scalars(select(Job.created_at).where(*theirs, Job.created_at > now - timedelta(days=1)).order_by(Job.created_at)).all()
        if len(today) >= settings.submissions_per_day:
            wait = math.ceil((today[0] + timedelta(days=1) - now).total_seconds())
            raise OverQuota(
                f"You submitted {len(today)} jobs in the last 24 hours (the limit is {settings.submissions_per_day}); "
                f"try again in {wait // 3600} h {wait % 3600 // 60} min",
                wait,
            )
    if settings.gpu_minutes_per_day > 0:
        used = gpu_minutes(db, user, now)
        if used >= settings.gpu_minutes_per_day:
            raise OverQuota(
                f"You used {used:.0f} of your {settings.gpu_minutes_per_day:g} GPU minutes in the last 24 hours; try again later", 3600
            )


def gpu_minutes(db: Session, user: User, now: datetime) -> float:
    """GPU minutes the user's jobs ran in the last 24 hours (a running one until now)."""
    day = db.execute(
        select(Job.started_at, Job.finished_at).where(Job.owner_id == user.id, Job.gpu_count > 0, Job.started_at > now - timedelta(days=1))
    ).all()
    return sum(((f or now) - s).total_seconds() for s, f in day if s is not None) / 60


def limits_of(db: Session, user: User, settings: Settings, deadlines: Deadlines) -> Limits:
    """The limits above as the student sees them: how much of each is used now (issue 36)."""
    now = utcnow()
    recent = db.scalars(select(Job.created_at).where(Job.owner_id == user.id, Job.created_at > now - timedelta(days=1))).all()
    active = db.scalar(select(func.count()).select_from(Job).where(Job.owner_id == user.id, Job.state.in_(UNFINISHED)))
    return Limits(
        exempt=exempt_from_limits(user, settings),
        jobs_active=active or 0,
        max_active_jobs=settings.max_active_jobs,
        submissions_last_minute=sum(1 for t in recent if t > now - timedelta(minutes=1)),
        submissions_per_minute=settings.submissions_per_minute,
        submissions_last_day=len(recent),
        submissions_per_day=settings.submissions_per_day,
        gpu_minutes_used=round(gpu_minutes(db, user, now), 1),
        gpu_minutes_per_day=settings.gpu_minutes_per_day,
        late_days_used=deadlines.days_used(user),
        late_days=settings.late_days,
    )


def check_ranked_rate(db: Session, user: User, settings: Settings, kind: str, course: CourseSpec | None) -> None:
    """Raise OverQuota (429) past the course's ranked submissions per student per day (issue 46:
    resubmitting until the noise hands out a lucky time is a lottery, not a faster kernel)."""
    per_day = course.ranked.per_day if course is not None else None
    if per_day is None or exempt_from_limits(user, settings):
        return
    now = utcnow()
    today = db.scalars(
        select(Job.created_at)
        .where(Job.owner_id == user.id, Job.kind == kind, Job.created_at > now - timedelta(days=1))
        .order_by(Job.created_at)
    ).all()
    if len(today) >= per_day:
        wait = math.ceil((today[0] + timedelta(days=1) - now).total_seconds())
        raise OverQuota(
            f"You submitted {len(today)} '{kind}' runs in the last 24 hours (the course allows {per_day}); "
            f"try again in {wait // 3600} h {wait % 3600 // 60} min",
            wait,
        )
