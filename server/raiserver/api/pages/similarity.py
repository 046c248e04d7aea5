"""The web view of similarity reports (issue 36, staff): the reports with a button to start one,
a report's progress and its most similar pairs, and one pair side by side with the matching regions
highlighted (copydetect's highlighter, HTML-escaped)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request, UploadFile, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy.orm import Session

from raiserver.access.csrf import check_csrf
from raiserver.api.deps import ServicesDep, SessionDep, WebStaff
from raiserver.api.pages.site import FORM_EXPIRED, render
from raiserver.errors import NotFound, TooLarge
from raiserver.grading import course
from raiserver.grading import similarityreport as reports
from raiserver.grading.similarity import highlight
from raiserver.store.tables import SimilarityReport

router = APIRouter(include_in_schema=False)


def _kinds(db: Session, ranked: set[str]) -> list[str]:
    """The kinds a report can be made for: those with a course build file."""
    return [k for k in sorted(ranked) if course.current(db, k) is not None]


@router.get("/similarity")
def similarity_page(request: Request, p: WebStaff, db: SessionDep, svc: ServicesDep) -> HTMLResponse:
    rows = reports.recent(db, p)
    return render(
        request,
        "similarity.html",
        p,
        rows=rows,
        kinds=_kinds(db, svc.settings.ranked_kind_set),
        progress=reports.progress_text,
        max_kib=reports.MAX_STARTER // 1024,
    )


@router.post("/similarity")
async def start_from_web(
    request: Request,
    csrf: Annotated[str, Form()],
    p: WebStaff,
    svc: ServicesDep,
    kind: Annotated[str, Form(max_length=32)] = "",
    starter: UploadFile | None = None,
) -> Response:
    check_csrf(request, csrf, FORM_EXPIRED)
    text = ""
    if starter is not None and starter.filename:
        data = await starter.read(reports.MAX_STARTER + 1)
        if len(data) > reports.MAX_STARTER:
            raise TooLarge(f"the starter code is larger than {reports.MAX_STARTER // 1024} KiB")
        text = data.decode("utf-8", "replace")

    def _start() -> int:
        with svc.db.session() as db:
            return reports.start(db, p, kind, text).id

    report = await run_in_threadpool(_start)
    return RedirectResponse(f"/similarity/{report}", status.HTTP_303_SEE_OTHER)


@router.get("/similarity/{report_id}")
def report_page(report_id: int, request: Request, p: WebStaff, db: SessionDep) -> HTMLResponse:
    r = reports.get(db, p, report_id)
    return render(request, "similarity_report.html", p, r=r, out=reports.report_out(r, db=db), progress=reports.progress_text(r))


@router.get("/similarity/{report_id}/pairs/{n}")
def pair_page(report_id: int, n: int, request: Request, p: WebStaff, db: SessionDep) -> HTMLResponse:
    r: SimilarityReport = reports.get(db, p, report_id)
    pairs = reports.shown_pairs(r)
    if not 1 <= n <= len(pairs):
        raise NotFound(f"report #{r.id} has no pair {n} (it has {len(pairs)})")
    pair, code = pairs[n - 1], r.code or {}
    members = reports.team_members(db, {pair["a"], pair["b"]})
    sides = [
        (pair[s], members[pair[s]], pair[f"{s}_job"], pair[f"share_{s}"], highlight(code[pair[f"{s}_job"]]["code"], pair[f"slices_{s}"]))
        for s in ("a", "b")
    ]
    return render(request, "similarity_pair.html", p, r=r, n=n, pair=pair, sides=sides, count=len(pairs))
