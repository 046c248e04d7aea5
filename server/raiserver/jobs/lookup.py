"""The job a user names, if they may see it (API and web alike): a whole id or any unique start of
one, or any unique end (the web view's lists show a job id's last characters), and the same "no
such job" whether it does not exist or is someone else's, so ids of others' jobs leak nothing."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from raiserver.access.permissions import Principal, can_cancel
from raiserver.errors import Conflict, Forbidden, NotFound
from raiserver.store.tables import Job

ID_LENGTH, MIN_PREFIX = 26, 6


def visible_job(db: Session, p: Principal, job_id: str) -> Job:
    """The job if this user may see it; NotFound otherwise. Any unique start of an id (6
    characters or more, any case) stands for it, among the jobs this user may see: what a student
    copied from a narrow table still works."""
    job_id = job_id.strip().upper()
    if len(job_id) < ID_LENGTH:
        return _job_by_prefix(db, p, job_id)
    job = db.scalars(select(Job).where(Job.id == job_id, p.jobs_seen)).first()
    if job is None:
        raise NotFound(f"no job {job_id} (or not yours)")
    return job


def cancellable_job(db: Session, p: Principal, job_id: str) -> Job:
    job = visible_job(db, p, job_id)
    if not can_cancel(p, job):
        raise Forbidden(f"job {job.id} is {job.owner.username}'s: only its owner or staff can cancel it")
    return job


def _job_by_prefix(db: Session, p: Principal, prefix: str) -> Job:
    if prefix and not prefix.isalnum():
        raise NotFound(f"no job {prefix}: a job id is letters and digits")
    if len(prefix) < MIN_PREFIX:  # said as such: "no job X" read as if X were looked up (issue 49)
        raise NotFound(f"{prefix} is too short for a job id: give at least {MIN_PREFIX} characters of it")
    q = select(Job).where(Job.id.startswith(prefix, autoescape=True) | Job.id.endswith(prefix, autoescape=True))
    matched = list(db.scalars(q.where(p.jobs_seen).order_by(Job.id).limit(50)))
    starts = [j for j in matched if j.id.startswith(prefix)]  # a unique start wins over ends
    found = (starts or matched)[:4]
    if not found:
        raise NotFound(f"no job {prefix} (none of yours starts or ends with it)")
    if len(found) > 1:
        more = ", …" if len(found) > 3 else ""
        where = "start" if starts else "end"
        raise Conflict(f"{prefix} is the {where} of several jobs ({', '.join(j.id for j in found[:3])}{more}); give more characters")
    return found[0]
