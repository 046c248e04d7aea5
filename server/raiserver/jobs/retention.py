"""What each student keeps in storage, and how it is freed: the per-student storage quota (one job
once stored 1.13 GB in 44 s), deleting a job's files (the student's own, or by retention rules an
admin applies: `raiserver retention`).

A job's files are its project archive (content-addressed: shared by every job that uploaded the
same bytes, removed with the last job that keeps it), its build folder and its stored log. Deleting
files keeps the job's row, state and results; runs of the verified kind (what instructors grade)
are kept unless staff delete them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from raiprotocol.models import JobState
from raiserver.access.permissions import exempt_from_limits
from raiserver.config import Settings
from raiserver.errors import Conflict, OverQuota
from raiserver.store.db import utcnow
from raiserver.store.storage import Storage
from raiserver.store.tables import Job, User

FINISHED = [s for s in JobState if s.finished]


def mib(n: int) -> str:
    return f"{n / 1024**2:,.0f} MiB" if n < 10 * 1024**3 else f"{n / 1024**3:,.1f} GiB"


@dataclass
class Usage:
    archives: int
    builds: int
    largest: list[tuple[str, int]] = field(default_factory=list)  # (job id, bytes) of the biggest jobs

    @property
    def total(self) -> int:
        return self.archives + self.builds


def usage(db: Session, user_id: int) -> Usage:
    """Bytes this user keeps: each distinct archive once, every build folder."""
    distinct = (
        select(Job.archive_sha256, func.max(Job.archive_bytes).label("size"))
        .where(Job.owner_id == user_id, Job.archive_kept.is_(True))
        .group_by(Job.archive_sha256)
        .subquery()
    )
    archives = db.scalar(select(func.coalesce(func.sum(distinct.c.size), 0))) or 0
    builds = db.scalar(select(func.coalesce(func.sum(Job.build_bytes), 0)).where(Job.owner_id == user_id, Job.has_build.is_(True))) or 0
    size = Job.build_bytes + Job.archive_bytes
    largest = db.execute(
        select(Job.id, size)
        .where(Job.owner_id == user_id, Job.state.in_(FINISHED), (Job.has_build.is_(True)) | (Job.archive_kept.is_(True)))
        .order_by(size.desc())
        .limit(3)
    ).all()
    return Usage(int(archives), int(builds), [(jid, int(n)) for jid, n in largest])


def check_storage(db: Session, user: User, settings: Settings, incoming: int = 0) -> None:
    """Raise OverQuota (429) if this upload would take the student past their storage quota."""
    limit = settings.storage_mb_per_student * 1024**2
    if limit <= 0 or exempt_from_limits(user, settings):
        return
    u = usage(db, user.id)
    if u.total + incoming <= limit:
        return
    biggest = ", ".join(f"{jid} ({mib(n)})" for jid, n in u.largest) or "none finished yet"
    raise OverQuota(
        f"You store {mib(u.total)} of your {mib(limit)} (archives {mib(u.archives)}, build folders {mib(u.builds)})"
        + (f" and this upload is {mib(incoming)}" if incoming else "")
        + f"; free space with 'raiclient delete JOB' (your largest: {biggest})",
        60,
    )


def delete_files(db: Session, storage: Storage, job: Job, keep_log: bool = True) -> int:
    """Remove a finished job's build folder and archive (and log, unless ``keep_log``); returns the
    bytes freed. The job's row, state and results stay."""
    if not job.state.finished:
        raise Conflict(f"job {job.id} is {job.state.value}; cancel it first")
    freed = 0
    if job.has_build:
        storage.build_path(job.id).unlink(missing_ok=True)
        freed += job.build_bytes
        job.has_build, job.build_bytes = False, 0
    if job.archive_kept:
        job.archive_kept = False
        others = db.scalar(
            select(func.count())
            .select_from(Job)
            .where(Job.archive_sha256 == job.archive_sha256, Job.archive_kept.is_(True), Job.id != job.id)
        )
        if not others:
            storage.archive_path(job.archive_sha256).unlink(missing_ok=True)
            freed += job.archive_bytes
    if not keep_log:
        path = storage.log_path(job.id)
        if path.exists():
            freed += path.stat().st_size
            path.unlink()
    db.commit()
    return freed


@dataclass
class Sweep:
    jobs: int = 0
    logs: int = 0
    freed: int = 0


def apply_retention(db: Session, storage: Storage, settings: Settings, apply: bool) -> Sweep:
    """Files of finished runs of other kinds than the verified one: archives and build folders after
    ``retain_days``, logs after ``retain_log_days`` (0 = keep). With ``apply`` False, only counts."""
    sweep = Sweep()
    now = utcnow()
    rules = [(settings.retain_days, False), (settings.retain_log_days, True)]
    for days, logs_too in rules:
        if days <= 0:
            continue
        old = db.scalars(
            select(Job).where(
                Job.state.in_(FINISHED),
                Job.kind != settings.verified_kind,
                Job.finished_at < now - timedelta(days=days),
                (Job.has_build.is_(True)) | (Job.archive_kept.is_(True)) if not logs_too else Job.id.is_not(None),
            )
        ).all()
        for job in old:
            log = storage.log_path(job.id)
            if logs_too and not log.exists():
                continue
            sweep.jobs += not logs_too
            sweep.logs += logs_too
            if apply:
                sweep.freed += delete_files(db, storage, job, keep_log=not logs_too)
            elif logs_too:
                sweep.freed += log.stat().st_size
            else:
                sweep.freed += (job.build_bytes if job.has_build else 0) + (job.archive_bytes if job.archive_kept else 0)
    return sweep
