"""Regrade requests (issue 36): a student asks staff to look at one run again, with a message;
staff re-measure the run (ranked runs, through ``lifecycle.remeasure``), adjust its grade with a
reason, or answer. Each of those closes the request, audited; the student reads the outcome.

One open request per run and student (a partial unique index backs the check); every text is
bounded and refused with one sentence before anything changes. Requests are for runs that count
toward a grade (a kind with a grade rule, or a ranked kind) and are bounded per student: at most
RAI_REGRADES_OPEN_PER_STUDENT open at once and RAI_REGRADES_PER_DAY asked in 24 hours (issue 50,
item 3: a student filed 15 requests of 2,000 characters in 0.1 s, on ungraded dev runs too, and
staff's page listed them all)."""

from __future__ import annotations

import math
from datetime import timedelta

from sqlalchemy import Select, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, joinedload

from raiprotocol.models import REGRADE_GRADE_CHARS, REGRADE_MESSAGE_CHARS, RegradeAction, RegradeOut
from raiserver.access.audit import audit
from raiserver.access.permissions import Principal, can_answer_regrades, can_request_regrade
from raiserver.config import Settings
from raiserver.errors import Conflict, Forbidden, Invalid, NotFound, TooManyAttempts
from raiserver.grading.kinds import rule_of
from raiserver.jobs.lifecycle import remeasure
from raiserver.parts import Services
from raiserver.store.db import utcnow
from raiserver.store.tables import Job, Kind, RegradeRequest, User

ACTIONS = ("remeasure", "adjust", "close")
OUTCOMES = {"remeasure": "remeasured", "adjust": "adjusted", "close": "answered"}


def bounded(text: str, what: str, limit: int = REGRADE_MESSAGE_CHARS, required: bool = True, hint: str = "") -> str:
    """The text trimmed, or a sentence saying why not: empty where one is needed, or too long."""
    text = text.strip()
    if required and not text:
        raise Invalid(f"{what} is empty{hint}")
    if len(text) > limit:
        raise Invalid(f"{what} is {len(text)} characters long; at most {limit}")
    return text


def counts_toward_a_grade(db: Session, settings: Settings, job: Job) -> bool:
    """Whether the run's kind is graded (it has a grade rule) or ranked (its board is re-measured):
    a run of any other kind (``dev``) has no grade to look at again."""
    if job.kind in settings.ranked_kind_set:
        return True
    row = db.get(Kind, job.kind)
    return row is not None and rule_of(row) is not None


def _within_limits(db: Session, settings: Settings, p: Principal) -> None:
    """The student's open requests and those asked in the last 24 hours, under their row's lock (the
    database's write lock on SQLite), so requests racing each other cannot all pass."""
    db.execute(update(User).where(User.id == p.user.id).values(id=User.id))
    held = db.scalars(
        select(RegradeRequest.id).where(RegradeRequest.student_id == p.user.id, RegradeRequest.state == "open").order_by(RegradeRequest.id)
    ).all()
    if len(held) >= settings.regrades_open_per_student:
        ids = ", ".join(f"#{i}" for i in held[:10])
        raise Conflict(
            f"you have {len(held)} open regrade requests ({ids}), the most at once; "
            "ask again once staff have answered one (raiclient regrades)"
        )
    now = utcnow()
    since = now - timedelta(days=1)
    asked, first = db.execute(
        select(func.count(RegradeRequest.id), func.min(RegradeRequest.created_at)).where(
            RegradeRequest.student_id == p.user.id, RegradeRequest.created_at > since
        )
    ).one()
    if asked >= settings.regrades_per_day:
        wait = max(1, math.ceil((first + timedelta(days=1) - now).total_seconds())) if first else 3600
        raise TooManyAttempts(
            f"you asked for {asked} regrades in the last 24 hours, the most a day; try again in {wait // 3600} h {wait % 3600 // 60} min",
            wait,
        )


def ask(db: Session, settings: Settings, p: Principal, job: Job, message: str) -> RegradeRequest:
    """A student of the run's team asks for a regrade of a graded run that has ended, within their limits."""
    if not can_request_regrade(p, job):
        raise Forbidden("staff answer regrade requests; they do not ask for them")
    text = bounded(message, "the message", hint=": say what staff should look at again")
    if not job.state.finished:
        raise Conflict(f"job {job.id} has not ended yet; ask for a regrade once it has")
    if not counts_toward_a_grade(db, settings, job):
        raise Invalid(
            f"job {job.id} is a '{job.kind}' run, which counts toward no grade ('{job.kind}' has no grade rule and is not ranked); "
            "ask about a run of a graded kind"
        )
    held = _open_of(db, job.id, p.user.id)
    if held is not None:
        raise Conflict(
            f"you already have an open regrade request (#{held.id}) for job {job.id}; its answer comes first (raiclient regrades)"
        )
    _within_limits(db, settings, p)
    req = RegradeRequest(job_id=job.id, student_id=p.user.id, message=text, state="open")
    db.add(req)
    try:
        db.flush()
    except IntegrityError:  # the same student's second request in the same instant
        db.rollback()
        raise Conflict(f"you already have an open regrade request for job {job.id}") from None
    audit(db, p.user.username, "regrade.request", job.id, request=req.id)
    db.commit()
    return req


def _open_of(db: Session, job_id: str, student_id: int) -> RegradeRequest | None:
    return db.scalar(
        select(RegradeRequest).where(
            RegradeRequest.job_id == job_id, RegradeRequest.student_id == student_id, RegradeRequest.state == "open"
        )
    )


def answer(db: Session, svc: Services, p: Principal, request_id: int, act: RegradeAction) -> RegradeRequest:
    """Staff close an open request: re-measure the run, adjust its grade with a reason, or answer.
    Everything is checked before anything changes; the request and the audit entry commit together."""
    if not can_answer_regrades(p):
        raise Forbidden("only staff answer regrade requests")
    if act.action not in ACTIONS:
        raise Invalid(f"unknown action {act.action[:16]!r}: one of {', '.join(ACTIONS)}")
    req = db.get(RegradeRequest, request_id, with_for_update=True)
    if req is None:
        raise NotFound(f"no regrade request #{request_id}")
    if req.state != "open":
        raise Conflict(f"regrade request #{req.id} was already {req.outcome} by {req.closed_by}; nothing changed")
    text = bounded(act.answer, "the answer", required=act.action == "close")
    detail: dict[str, object] = {"job": req.job_id, "student": req.student.username}
    if act.action == "adjust":
        req.grade = bounded(act.grade, "the grade", REGRADE_GRADE_CHARS)
        req.reason = bounded(act.reason, "the reason for the new grade")
        detail |= {"grade": req.grade, "reason": req.reason}
    req.answer = text or None
    req.state, req.outcome = "closed", OUTCOMES[act.action]
    req.closed_by, req.closed_at = p.user.username, utcnow()
    if act.action == "remeasure":  # commits the new job and the closed request together, or refuses (not ranked)
        again = remeasure(db, svc, req.job, p.user, act.repeats)
        req.remeasure_job = again.id
        detail |= {"new_job": again.id, "repeats": act.repeats}
    audit(db, p.user.username, f"regrade.{act.action}", f"#{req.id}", answer=req.answer, **detail)
    db.commit()
    return req


def _listed() -> Select[RegradeRequest]:
    """Requests with what a list shows of each (its run's kind, its student): in the same statement,
    not two more per row (issue 52: 500 statements for staff's page of 250 requests)."""
    return select(RegradeRequest).options(joinedload(RegradeRequest.job), joinedload(RegradeRequest.student))


def for_student(db: Session, p: Principal, limit: int = 100) -> list[RegradeRequest]:
    """The caller's own requests, newest first."""
    q = _listed().where(RegradeRequest.student_id == p.user.id)
    return list(db.scalars(q.order_by(RegradeRequest.id.desc()).limit(limit)))


def for_job(db: Session, job: Job, limit: int = 100) -> list[RegradeRequest]:
    """A run's requests, for whoever may see the run (its team and staff), oldest first."""
    q = select(RegradeRequest).where(RegradeRequest.job_id == job.id).order_by(RegradeRequest.id)
    return list(db.scalars(q.limit(limit)))


def for_staff(db: Session, p: Principal, everything: bool = False, limit: int = 500) -> list[RegradeRequest]:
    """The open requests, oldest first (the order to answer them in); ``everything``: closed ones too, newest first."""
    if not can_answer_regrades(p):
        raise Forbidden("only staff see the regrade requests")
    q = _listed()
    q = q.order_by(RegradeRequest.id.desc()) if everything else q.where(RegradeRequest.state == "open").order_by(RegradeRequest.id)
    return list(db.scalars(q.limit(limit)))


def may_ask(db: Session, settings: Settings, p: Principal, job: Job, requests: list[RegradeRequest]) -> bool:
    """Whether the job page offers this user the form: their run, ended, graded, and none of theirs open."""
    return (
        can_request_regrade(p, job)
        and job.state.finished
        and not any(r.state == "open" and r.student_id == p.user.id for r in requests)
        and counts_toward_a_grade(db, settings, job)
    )


def out(req: RegradeRequest) -> RegradeOut:
    return RegradeOut(
        id=req.id,
        job_id=req.job_id,
        kind=req.job.kind,
        student=req.student.username,
        message=req.message,
        created_at=req.created_at,
        state=req.state,
        outcome=req.outcome,
        answer=req.answer,
        grade=req.grade,
        reason=req.reason,
        remeasure_job=req.remeasure_job,
        closed_by=req.closed_by,
        closed_at=req.closed_at,
    )
