"""Leaderboard API: JSON for everyone (pseudonyms for students), CSV for staff grading."""

from __future__ import annotations

import csv
import io
from typing import Any, Literal

from fastapi import APIRouter, Query
from fastapi.responses import PlainTextResponse

from raiprotocol.models import Entry
from raiserver.api.deps import CurrentUser, ServicesDep, SessionDep, StaffUser
from raiserver.grading.leaderboard import leaderboard, quarantined

router = APIRouter(prefix="/api/v1", tags=["leaderboard"])


@router.get("/leaderboard", response_model=list[Entry])
def get_leaderboard(
    *,
    n: int | None = Query(None, ge=1, le=10000),
    board: Literal["ranked", "unverified"] = Query("ranked", description="unverified: kinds that do not rank"),
    p: CurrentUser,
    db: SessionDep,
    svc: ServicesDep,
) -> list[Entry]:
    return leaderboard(db, svc.settings, p, n, board)


@router.get("/leaderboard/quarantine")
def get_quarantine(p: StaffUser, db: SessionDep, svc: ServicesDep) -> list[dict[str, Any]]:
    """Staff: ranked runs below the physics floor (issue 46), newest first: not ranked, each worth a look."""
    return quarantined(db, svc.settings)


@router.get("/leaderboard.csv", response_class=PlainTextResponse)
def leaderboard_csv(p: StaffUser, db: SessionDep, svc: ServicesDep) -> PlainTextResponse:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["rank", "team", "members", "op_time_s", "op_times_s", "correctness", "when", "gpu", "kind", "verified", "job", "flags"])
    for e in leaderboard(db, svc.settings, p):
        w.writerow(
            [
                e.rank,
                e.name,
                " ".join(e.members or []),
                f"{e.op_time:.9f}",
                " ".join(f"{t:.9f}" for t in e.op_times),
                e.correctness,
                e.when.isoformat(),
                e.gpu or "",
                e.kind,
                e.verified,
                e.job_id,
                "; ".join(e.flags),
            ]
        )
    return PlainTextResponse(
        buf.getvalue(), media_type="text/csv", headers={"Content-Disposition": 'attachment; filename="leaderboard.csv"'}
    )
