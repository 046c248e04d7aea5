"""Regrade requests over the API (issue 36): students ask and read the outcomes; staff list the
open ones and answer them. The rules are jobs/regrades.py's."""

from __future__ import annotations

from fastapi import APIRouter, Query

from raiprotocol.models import RegradeAction, RegradeIn, RegradeOut
from raiserver.api.deps import CurrentUser, ServicesDep, SessionDep, StaffUser
from raiserver.jobs import regrades
from raiserver.jobs.lookup import visible_job

router = APIRouter(prefix="/api/v1", tags=["regrades"])


@router.post("/jobs/{job_id}/regrade", response_model=RegradeOut, status_code=201)
def ask(job_id: str, body: RegradeIn, p: CurrentUser, db: SessionDep, svc: ServicesDep) -> RegradeOut:
    """Ask staff to look at a graded run again, saying why (up to 2000 characters); one open request
    per run, a few open at once and a few a day per student."""
    return regrades.out(regrades.ask(db, svc.settings, p, visible_job(db, p, job_id), body.message))


@router.get("/regrades", response_model=list[RegradeOut])
def mine(p: CurrentUser, db: SessionDep) -> list[RegradeOut]:
    """The caller's regrade requests and their outcomes, newest first."""
    return [regrades.out(r) for r in regrades.for_student(db, p)]


@router.get("/admin/regrades", response_model=list[RegradeOut])
def open_requests(p: StaffUser, db: SessionDep, everything: bool = Query(False, alias="all")) -> list[RegradeOut]:
    """The open requests, oldest first; ``all``: the answered ones too."""
    return [regrades.out(r) for r in regrades.for_staff(db, p, everything)]


@router.post("/admin/regrades/{request_id}", response_model=RegradeOut)
def answer(request_id: int, body: RegradeAction, p: StaffUser, db: SessionDep, svc: ServicesDep) -> RegradeOut:
    """Close an open request: re-measure the run, adjust its grade with a reason, or answer. Audited."""
    return regrades.out(regrades.answer(db, svc, p, request_id, body))
