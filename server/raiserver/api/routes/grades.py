"""A kind's grades for staff (issue 36): rai's CSV or Canvas's gradebook import, one row per student."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import PlainTextResponse

from raiserver.access.audit import audit
from raiserver.api.deps import ServicesDep, SessionDep, StaffUser
from raiserver.grading.gradebook import canvas_csv, rai_csv
from raiserver.grading.grades import grades

router = APIRouter(prefix="/api/v1/admin", tags=["grades"])


def grade_sheet(
    request: Request, db: SessionDep, svc: ServicesDep, kind: str, fmt: str, assignment: str | None, by: str, via: str
) -> PlainTextResponse:
    """The sheet as a download (the API's and the web view's), audited: grades leaving the service
    are a staff action like any other (who took which kind's grades, in which form, when)."""
    _, rows = grades(db, svc.settings, kind)
    if fmt == "canvas":
        text, name = canvas_csv(rows, assignment or kind), f"{kind}-canvas.csv"
    else:
        text, name = rai_csv(rows, (svc.settings.public_url or str(request.base_url)).rstrip("/")), f"{kind}-grades.csv"
    audit(db, by, "grades.export", kind, format=fmt, students=len(rows), via=via)
    db.commit()
    return PlainTextResponse(text, media_type="text/csv", headers={"Content-Disposition": f'attachment; filename="{name}"'})


@router.get("/grades/{kind}", response_class=PlainTextResponse)
def grade_kind(
    *,
    kind: str,
    request: Request,
    fmt: Literal["csv", "canvas"] = Query("csv", alias="format"),
    assignment: str | None = Query(None, max_length=200, description="Canvas: the assignment's column name"),
    p: StaffUser,
    db: SessionDep,
    svc: ServicesDep,
) -> PlainTextResponse:
    return grade_sheet(request, db, svc, kind, fmt, assignment, p.user.username, "api")
