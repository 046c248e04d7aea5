"""Regrade requests (issue 36): a student asks staff to look at one run again, with a message;
staff re-measure the run (ranked runs, through ``lifecycle.remeasure``), adjust its grade with a
reason, or answer. Each of those closes the request, audited; the student reads the outcome.

One open request per run and student (a partial unique index backs the check); every text is
bounded and refused with one sentence before anything changes."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from raiprotocol.models import REGRADE_GRADE_CHARS, REGRADE_MESSAGE_CHARS, RegradeAction, RegradeOut
from raiserver.access.audit import audit
from raiserver.access.permissions import Principal, can_answer_regrades, can_request_regrade
from raiserver.errors import Conflict, Forbidden, Invalid, NotFound
from raiserver.jobs.lifecycle import remeasure
from raiserver.services import Services
from raiserver.store.db import utcnow
from raiserver.store.tables import Job, RegradeRequest

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


def ask(db: Session, p: Principal, job: Job, message: str) -> RegradeRequest:
    """A student of the run's team asks for a regrade of a run that has ended."""
    if not can_request_regrade(p, job):
        raise Forbidden("staff answer regrade requests; they do not ask for them")
    text = bounded(message, "the message", hint=": say what staff should look at again")
    if not job.state.finished:
        raise Conflict(f"job {job.id} has not ended yet; ask for a regrade once it has")
    held = _open_of(db, job.id, p.user.id)
    if held is not None:
        raise Conflict(
            f"you already have an open regrade request (#{held.id}) for job {job.id}; its answer comes first (raiclient regrades)"
        )
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


def for_student(db: Session, p: Principal, limit: int = 100) -> list[RegradeRequest]:
    """The caller's own requests, newest first."""
    q = select(RegradeRequest).where(RegradeRequest.student_id == p.user.id)
    return list(db.scalars(q.order_by(RegradeRequest.id.desc()).limit(limit)))


def for_job(db: Session, job: Job, limit: int = 100) -> list[RegradeRequest]:
    """A run's requests, for whoever may see the run (its team and staff), oldest first."""
    q = select(RegradeRequest).where(RegradeRequest.job_id == job.id).order_by(RegradeRequest.id)
    return list(db.scalars(q.limit(limit)))


def for_staff(db: Session, p: Principal, everything: bool = False, limit: int = 500) -> list[RegradeRequest]:
    """The open requests, oldest first (the order to answer them in); ``everything``: closed ones too, newest first."""
    if not can_answer_regrades(p):
        raise Forbidden("only staff see the regrade requests")
    q = select(RegradeRequest)
    q = q.order_by(RegradeRequest.id.desc()) if everything else q.where(RegradeRequest.state == "open").order_by(RegradeRequest.id)
    return list(db.scalars(q.limit(limit)))


def may_ask(p: Principal, job: Job, requests: list[RegradeRequest]) -> bool:
    """Whether the job page offers this user the form: their run, ended, and none of theirs open."""
    return can_request_regrade(p, job) and job.state.finished and not any(r.state == "open" and r.student_id == p.user.id for r in requests)


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
