"""Per-student limits: jobs waiting or running at once, submissions per minute, GPU minutes per
day. Over a limit: HTTP 429 with Retry-After and one sentence the client prints as is."""

from __future__ import annotations

import math
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from raiprotocol.states import UNFINISHED
from raiserver.access.permissions import STAFF
from raiserver.config import Settings
from raiserver.errors import OverQuota
from raiserver.store.db import utcnow
from raiserver.store.tables import Job, User


def check_quotas(db: Session, user: User, settings: Settings) -> None:
    """Raise OverQuota (429) if this user may not submit now. Called before the upload is read, and again,
    with the user's row locked, when the job is created (so two racing uploads cannot both pass)."""
    if settings.staff_exempt and user.role in STAFF:
        return
    active = db.scalars(
        select(Job.id).where(Job.owner_id == user.id, Job.state.in_(UNFINISHED))
        .order_by(Job.created_at)
    ).all()
    if len(active) >= settings.max_active_jobs:
        ids = ", ".join(active[:5])
        raise OverQuota(f"You already have {len(active)} jobs in the queue ({ids}); wait for one to finish or cancel it", 30)
    now = utcnow()
    recent = db.scalars(
        select(Job.created_at).where(Job.owner_id == user.id, Job.created_at > now - timedelta(minutes=1)).order_by(Job.created_at)
    ).all()
    if len(recent) >= settings.submissions_per_minute:
        wait = math.ceil((recent[0] + timedelta(minutes=1) - now).total_seconds())
        raise OverQuota(f"You submitted {len(recent)} jobs in the last minute (the limit is {settings.submissions_per_minute}); "
                       f"try again in {wait} s", wait)
    if settings.gpu_minutes_per_day > 0:
        day = db.execute(
            select(Job.started_at, Job.finished_at).where(
                Job.owner_id == user.id, Job.gpu_count > 0, Job.started_at > now - timedelta(days=1))
        ).all()
        used = sum(((f or now) - s).total_seconds() for s, f in day if s is not None) / 60
        if used >= settings.gpu_minutes_per_day:
            raise OverQuota(f"You used {used:.0f} of your {settings.gpu_minutes_per_day:g} GPU minutes in the last 24 hours; "
                           "try again later", 3600)
