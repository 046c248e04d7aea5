"""A similarity report's life (issue 36): staff start one for a kind (``start``: checked, queued,
audited); the server's background loop (services/, one process at a time through a Redis lock)
makes it (``make``) off every request's path, noting its progress in the database; its pages and the
client read it (``report_out``). One report is made at a time.

What is compared: each team's latest submission of the kind (a student without a team is a team of
one; staff's own runs and re-measures are left out), its student files that are code (the course
build's ``student_files``: ``new-forward.cu``, not ``report.pdf``), read from the stored archive."""

from __future__ import annotations

import logging
import tarfile
import time
from collections.abc import Callable
from pathlib import PurePosixPath
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from raiprotocol.models import SimilarityOut, SimilarityPair
from raiserver.access.audit import audit
from raiserver.access.permissions import Principal, can_run_similarity, run_by_staff, students_only
from raiserver.errors import Conflict, Forbidden, Invalid, NotFound, TooLarge
from raiserver.grading import course
from raiserver.grading.similarity import Doc, compare
from raiserver.store.db import Database, utcnow
from raiserver.store.storage import Storage
from raiserver.store.tables import Job, SimilarityReport, User

log = logging.getLogger("raiserver")
CODE_SUFFIXES = {".cu", ".cuh", ".c", ".cc", ".cpp", ".cxx", ".h", ".hh", ".hpp"}
MAX_STARTER = 256 * 1024  # bytes
MAX_FILE = 128 * 1024  # a student file larger than this is not code anyone wrote by hand: left out (and the kept code stays small)
BUSY = ("queued", "running")
NOTE_EVERY = 1.0  # seconds between progress notes in the database


def code_files(names: list[str]) -> list[str]:
    return [n for n in names if PurePosixPath(n).suffix.lower() in CODE_SUFFIXES]


def start(db: Session, p: Principal, kind: str, starter: str) -> SimilarityReport:
    """Queue a report for ``kind``; everything is checked first, and one report is made at a time."""
    if not can_run_similarity(p):
        raise Forbidden("similarity reports are for staff")
    row = course.current(db, kind)
    if row is None:
        raise Invalid(
            f"'{kind[:32]}' has no course build file installed, so its student files are not known "
            "('raiclient admin course show' lists the kinds that have one)"
        )
    files = code_files(course.spec_of(row).ranked.student_files)
    if not files:
        raise Invalid(f"none of '{kind}''s student files ({', '.join(course.spec_of(row).ranked.student_files)}) is code")
    if len(starter.encode()) > MAX_STARTER:
        raise TooLarge(f"the starter code is larger than {MAX_STARTER // 1024} KiB")
    busy = db.scalar(select(SimilarityReport).where(SimilarityReport.state.in_(BUSY)).limit(1))
    if busy is not None:
        raise Conflict(
            f"similarity report #{busy.id} ('{busy.kind}') is {busy.state}{progress_text(busy)}: "
            "one is made at a time; start this one when it is done"
        )
    report = SimilarityReport(kind=kind, state="queued", started_by=p.user.username, starter=starter, files=files, done=0, total=0, teams=0)
    db.add(report)
    db.flush()
    audit(db, p.user.username, "similarity.start", kind, report=report.id, files=files, starter_bytes=len(starter.encode()))
    db.commit()
    return report


def progress_text(r: SimilarityReport) -> str:
    if r.state != "running" or not r.phase:
        return ""
    unit = "teams" if r.phase == "reading" else "pairs"
    return f", {r.phase} {r.done}/{r.total} {unit}"


def next_report(db: Session) -> int | None:
    """The report to make now: the oldest queued one, or one left running by a server process that
    stopped (the loop's lock says no other process makes it)."""
    return db.scalar(select(SimilarityReport.id).where(SimilarityReport.state.in_(BUSY)).order_by(SimilarityReport.id).limit(1))


def latest_per_team(db: Session, kind: str) -> list[tuple[str, Job]]:
    """Each team's latest submission of ``kind`` whose archive is kept, by team name."""
    rows = db.execute(
        select(Job, User)
        .join(User, Job.owner_id == User.id)
        .where(Job.kind == kind, Job.remeasure_of.is_(None), Job.archive_kept.is_(True))
        .order_by(Job.created_at.desc())
    ).all()
    latest: dict[str, Job] = {}
    for job, user in rows:
        if run_by_staff(user):
            continue
        latest.setdefault(user.team or user.username, job)
    return sorted(latest.items())


def read_code(storage: Storage, job: Job, files: list[str]) -> str | None:
    """The job's student files that are code, one after the other; None when none is there."""
    path = storage.archive_path(job.archive_sha256)
    if not path.exists():
        return None
    found: dict[str, str] = {}
    try:
        with tarfile.open(path, "r:gz") as tar:
            for member in tar:
                name = member.name.removeprefix("./")
                if name in files and member.isreg() and member.size <= MAX_FILE:
                    fh = tar.extractfile(member)
                    if fh is not None:
                        found[name] = fh.read(MAX_FILE).decode("utf-8", "replace")
    except (OSError, tarfile.TarError):
        return None
    return "\n".join(found[n] for n in files if n in found) or None


def make(db: Database, storage: Storage, report_id: int, beat: Callable[[], None] = lambda: None) -> None:
    """Make the report: read each team's code, compare every pair, keep the most similar ones.
    ``beat`` is called with each progress note (the loop renews its lock)."""
    with db.session() as s:
        row = s.get_one(SimilarityReport, report_id)
        row.state, row.started_at, row.phase, row.done, row.total = "running", utcnow(), "reading", 0, 0
        kind, files, starter = row.kind, list(row.files or []), row.starter
    try:
        with db.session() as s:
            teams = latest_per_team(s, kind)
        docs = [Doc(team, job.id, code) for team, job in teams if (code := read_code(storage, job, files)) is not None]
        noted = [0.0]

        def progress(phase: str, done: int, total: int) -> None:
            now = time.monotonic()
            if now - noted[0] < NOTE_EVERY and done < total:
                return
            noted[0] = now
            with db.session() as s:
                r = s.get_one(SimilarityReport, report_id)
                r.phase, r.done, r.total = phase, done, total
            beat()

        pairs = compare(docs, starter, progress)
        kept = {d.job_id for p in pairs for d in (docs[p.a], docs[p.b])}
        with db.session() as s:
            r = s.get_one(SimilarityReport, report_id)
            r.state, r.finished_at, r.teams = "done", utcnow(), len(docs)
            r.pairs = [_pair_json(docs, p) for p in pairs]
            r.code = {d.job_id: {"team": d.team, "code": d.code} for d in docs if d.job_id in kept}
            skipped = len(teams) - len(docs)
            r.message = f"{len(docs)} teams compared" + (
                f"; {skipped} left out (archive no longer kept, or no {', '.join(files)} in it)" if skipped else ""
            )
    except Exception as exc:  # the report says it failed, and why; the server goes on
        log.exception("similarity report %s failed", report_id)
        with db.session() as s:
            r = s.get_one(SimilarityReport, report_id)
            r.state, r.finished_at, r.message = "failed", utcnow(), f"failed: {str(exc)[:300]}"


def _pair_json(docs: list[Doc], p: Any) -> dict[str, Any]:
    a, b = docs[p.a], docs[p.b]
    return {
        "a": a.team,
        "b": b.team,
        "a_job": a.job_id,
        "b_job": b.job_id,
        "score": p.score,
        "share_a": p.share_a,
        "share_b": p.share_b,
        "tokens": p.tokens,
        "slices_a": p.slices_a,
        "slices_b": p.slices_b,
    }


def get(db: Session, p: Principal, report_id: int) -> SimilarityReport:
    if not can_run_similarity(p):
        raise Forbidden("similarity reports are for staff")
    row = db.get(SimilarityReport, report_id)
    if row is None:
        raise NotFound(f"no similarity report #{report_id}")
    return row


def recent(db: Session, p: Principal, limit: int = 50) -> list[SimilarityReport]:
    if not can_run_similarity(p):
        raise Forbidden("similarity reports are for staff")
    return list(db.scalars(select(SimilarityReport).order_by(SimilarityReport.id.desc()).limit(limit)))


def team_members(db: Session, names: set[str]) -> dict[str, list[str]]:
    """Each compared team's students by username (issue 49: a TA acts on people, not team names);
    a student without a team was compared as themself."""
    found: dict[str, list[str]] = {}
    if names:
        for team, username in db.execute(
            select(User.team, User.username).where(User.team.in_(names), students_only()).order_by(User.username)
        ):
            found.setdefault(team or "", []).append(username)
    return {name: found.get(name) or [name] for name in names}


def shown_pairs(r: SimilarityReport) -> list[dict[str, Any]]:
    """The report's pairs that share something: a pair with no matching region says nothing
    (issue 49), whatever an older report kept."""
    return [p for p in (r.pairs or []) if p.get("tokens", 0) > 0 and p.get("score", 0) > 0]


def report_out(r: SimilarityReport, pairs: int = 50, db: Session | None = None) -> SimilarityOut:
    kept = shown_pairs(r)[:pairs]
    members = team_members(db, {p[s] for p in kept for s in ("a", "b")}) if db is not None else {}
    return SimilarityOut(
        id=r.id,
        kind=r.kind,
        state=r.state,
        started_by=r.started_by,
        created_at=r.created_at,
        started_at=r.started_at,
        finished_at=r.finished_at,
        phase=r.phase,
        done=r.done,
        total=r.total,
        teams=r.teams,
        message=r.message,
        files=r.files or [],
        pairs=[
            SimilarityPair.model_validate({**p, "a_members": members.get(p["a"], []), "b_members": members.get(p["b"], [])}) for p in kept
        ],
    )
