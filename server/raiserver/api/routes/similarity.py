"""Similarity reports over the API (issue 36, staff): start one for a kind, follow its progress,
read the most similar pairs. Made in the background (services/); the rules are grading/similarityreport.py's."""

from __future__ import annotations

from fastapi import APIRouter, Query

from raiprotocol.models import SimilarityIn, SimilarityOut
from raiserver.api.deps import SessionDep, StaffUser
from raiserver.grading import similarityreport as reports

router = APIRouter(prefix="/api/v1/admin/similarity", tags=["admin"])


@router.post("", response_model=SimilarityOut, status_code=202)
def start(body: SimilarityIn, p: StaffUser, db: SessionDep) -> SimilarityOut:
    """Queue a report over each team's latest submission of ``kind``; the starter code is boilerplate. Audited."""
    return reports.report_out(reports.start(db, p, body.kind, body.starter))


@router.get("", response_model=list[SimilarityOut])
def recent(p: StaffUser, db: SessionDep) -> list[SimilarityOut]:
    """The latest reports, newest first, without their pairs."""
    return [reports.report_out(r, pairs=0) for r in reports.recent(db, p)]


@router.get("/{report_id}", response_model=SimilarityOut)
def one(report_id: int, p: StaffUser, db: SessionDep, n: int = Query(20, ge=0, le=50)) -> SimilarityOut:
    """A report's progress, and once done its ``n`` most similar pairs."""
    return reports.report_out(reports.get(db, p, report_id), pairs=n, db=db)
