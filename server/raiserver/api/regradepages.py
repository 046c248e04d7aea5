"""The web view of regrade requests (issue 36): a student's form on the job page, and staff's page
of open requests with a way to answer each. The rules are jobs/regrades.py's; a refusal shows
the error page with its one sentence."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from raiprotocol.models import REGRADE_GRADE_CHARS, REGRADE_MESSAGE_CHARS, RegradeAction
from raiserver.access.csrf import check_csrf
from raiserver.api.deps import ServicesDep, SessionDep, WebUser
from raiserver.api.pages import FORM_EXPIRED, render
from raiserver.jobs import regrades
from raiserver.jobs.lookup import visible_job

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


@router.get("/regrades")
def regrades_page(request: Request, p: WebUser, db: SessionDep, everything: bool = False) -> HTMLResponse:
    rows = [regrades.out(r) for r in regrades.for_staff(db, p, everything)]
    return render(
        request, "regrades.html", p, rows=rows, everything=everything, message_chars=REGRADE_MESSAGE_CHARS, grade_chars=REGRADE_GRADE_CHARS
    )


@router.post("/regrades/{request_id}")
def answer_from_web(
    request_id: int,
    request: Request,
    csrf: Annotated[str, Form()],
    p: WebUser,
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
