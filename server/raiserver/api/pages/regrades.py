"""The web view of regrade requests (issue 36): a student's form on the job page, and staff's page
of open requests with a way to answer each. The rules are jobs/regrades.py's; a refusal shows
the error page with its one sentence."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Form, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy import select
from sqlalchemy.orm import Session

from raiprotocol.models import REGRADE_GRADE_CHARS, REGRADE_MESSAGE_CHARS, JobResultSummary, RegradeAction
from raiserver.access.csrf import check_csrf
from raiserver.api.deps import ServicesDep, SessionDep, WebRegradeAnswerer, WebRegradesViewer, WebUser
from raiserver.api.pages.site import FORM_EXPIRED, render
from raiserver.config import Settings
from raiserver.errors import Invalid
from raiserver.grading.grades import GradeRow, grades
from raiserver.jobs import regrades
from raiserver.jobs.lookup import visible_job
from raiserver.store.summaries import summary_of
from raiserver.store.tables import Job, RegradeRequest

router = APIRouter(include_in_schema=False)


@router.post("/jobs/{job_id}/regrade")
def ask_from_web(
    job_id: str,
    request: Request,
    csrf: Annotated[str, Form()],
    p: WebUser,
    db: SessionDep,
    svc: ServicesDep,
    message: Annotated[str, Form(max_length=64 * 1024)] = "",
) -> Response:
    check_csrf(request, csrf, FORM_EXPIRED)
    job = visible_job(db, p, job_id)
    regrades.ask(db, svc.settings, p, job, message)
    return RedirectResponse(f"/jobs/{job.id}#regrades", status.HTTP_303_SEE_OTHER)


def op_time(job: Job) -> str:
    """The run's op time as it counts: what rai measured (ranked runs), else what the program printed."""
    summary = summary_of(job)
    m = summary.measured if summary else None
    if m is not None and m.op_time is not None:
        return f"{m.op_time:.6f} s (measured by rai)"
    if summary is not None and summary.op_time_total is not None:
        return f"{summary.op_time_total:.6f} s (printed by the program)"
    return "none" if job.state.finished else f"none yet ({job.state.value})"


def run_facts(db: Session, settings: Settings, asked: list[RegradeRequest]) -> dict[int, dict[str, Any]]:
    """What staff need beside each request (issue 49): the run's op time, the student's grade on its
    kind as it stands now and the run it comes from, and the run's re-measures so far (one is
    enough, most often). Each kind's grades are computed once for the page."""
    sheets: dict[str, dict[str, GradeRow] | str] = {}
    again: dict[str, list[tuple[Job, JobResultSummary | None]]] = {}
    ids = {r.job_id for r in asked}
    if ids:
        for j in db.scalars(select(Job).where(Job.remeasure_of.in_(ids)).order_by(Job.created_at)):
            again.setdefault(j.remeasure_of or "", []).append((j, summary_of(j)))
    facts = {}
    for r in asked:
        kind = r.job.kind
        if kind not in sheets:
            try:
                sheets[kind] = {row.username: row for row in grades(db, settings, kind)[1]}
            except Invalid as exc:
                sheets[kind] = str(exc).split(";")[0]
        sheet = sheets[kind]
        if isinstance(sheet, str):
            grade = f"none: {sheet}"
        elif (row := sheet.get(r.student.username)) is None:
            grade = "none: not an active student on the roster"
        else:
            source = "" if row.run is None else " (this run)" if row.run.job.id == r.job_id else f" (from job {row.run.job.id})"
            grade = f"{row.grade:g} of {row.points:g}{source}" + (f": {row.reason}" if row.reason else "")
        facts[r.id] = {"op_time": op_time(r.job), "grade": grade, "again": again.get(r.job_id, [])}
    return facts


@router.get("/regrades")
def regrades_page(request: Request, p: WebRegradesViewer, db: SessionDep, svc: ServicesDep, everything: bool = False) -> HTMLResponse:
    asked = regrades.for_staff(db, p, everything)
    return render(
        request,
        "regrades.html",
        p,
        rows=[regrades.out(r) for r in asked],
        facts=run_facts(db, svc.settings, asked),
        everything=everything,
        message_chars=REGRADE_MESSAGE_CHARS,
        grade_chars=REGRADE_GRADE_CHARS,
    )


@router.post("/regrades/{request_id}")
def answer_from_web(
    request_id: int,
    request: Request,
    csrf: Annotated[str, Form()],
    p: WebRegradeAnswerer,
    db: SessionDep,
    svc: ServicesDep,
    action: Annotated[str, Form(max_length=16)] = "",
    answer: Annotated[str, Form(max_length=64 * 1024)] = "",
    grade: Annotated[str, Form(max_length=1024)] = "",
    reason: Annotated[str, Form(max_length=64 * 1024)] = "",
    repeats: Annotated[int, Form(ge=2, le=20)] = 10,
) -> Response:
    check_csrf(request, csrf, FORM_EXPIRED)
    regrades.answer(db, svc, p, request_id, RegradeAction(action=action, answer=answer, grade=grade, reason=reason, repeats=repeats))
    return RedirectResponse("/regrades", status.HTTP_303_SEE_OTHER)
