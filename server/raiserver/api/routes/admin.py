"""Course management for instructors and admins: roster import, keys, users, the audit log."""

from __future__ import annotations

from fastapi import APIRouter, Body, Query, Request
from fastapi.concurrency import run_in_threadpool
from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from raiprotocol.models import AuditRow, CourseBuildIn, CourseBuildOut, IssuedKeys, JobOut, PullBody, PullRequest, RosterResult, UserRow
from raiserver.access.audit import audit
from raiserver.access.auth import revoke_keys, rotate_keys
from raiserver.access.permissions import may_change
from raiserver.access.roster import import_csv, issued
from raiserver.api.deps import InstructorUser, ServicesDep, SessionDep, StaffUser
from raiserver.errors import NotFound
from raiserver.fleet.images import blob_path, request_pull, tar_images
from raiserver.grading import course
from raiserver.jobs.lifecycle import remeasure, rerun
from raiserver.jobs.lookup import visible_job
from raiserver.jobs.views import QueueView, job_out
from raiserver.store.tables import AuditEntry, CourseBuild, Job, User

router = APIRouter(prefix="/api/v1/admin", tags=["admin"])


@router.post("/roster", response_model=RosterResult)
def import_roster(*, csv_text: str = Body(..., media_type="text/csv"), p: InstructorUser, db: SessionDep) -> RosterResult:
    """CSV with a header: username (required), name or firstname/lastname, email, team, role.
    New users get keys (returned once); students missing from the CSV are deactivated, history kept."""
    result = import_csv(db, p.user, csv_text)
    audit(
        db,
        p.user.username,
        "roster.import",
        "",
        created=[c.username for c in result.created],
        updated=result.updated,
        deactivated=result.deactivated,
        reactivated=result.reactivated,
    )
    return result


def _user(db: Session, username: str) -> User:
    user = db.scalar(select(User).where(User.username == username))
    if user is None:
        raise NotFound(f"no user {username}")
    return user


@router.post("/users/{username}/keys", response_model=IssuedKeys)
def rotate(username: str, p: InstructorUser, db: SessionDep) -> IssuedKeys:
    """New keys for a user; the old access key stops working at once."""
    user = _user(db, username)
    may_change(p.user, user)
    secret = rotate_keys(db, user, reason="rotated")
    audit(db, p.user.username, "keys.rotate", username)
    return issued(user, secret)


@router.post("/users/{username}/revoke", response_model=UserRow)
def revoke(username: str, p: InstructorUser, db: SessionDep) -> UserRow:
    """The user's key stops working and no new one is issued (rotate to give them one again)."""
    user = _user(db, username)
    may_change(p.user, user)
    revoke_keys(db, user)
    audit(db, p.user.username, "keys.revoke", username)
    return UserRow(username=user.username, role=user.role, team=user.team, email=user.email, active=user.active)


@router.get("/users", response_model=list[UserRow])
def users(_: StaffUser, db: SessionDep) -> list[UserRow]:
    return [
        UserRow(username=u.username, role=u.role, team=u.team, email=u.email, active=u.active)
        for u in db.scalars(select(User).order_by(User.username))
    ]


@router.get("/audit", response_model=list[AuditRow])
def audit_log(
    *,
    limit: int = Query(100, ge=1, le=1000),
    action: str | None = Query(None, max_length=64, description="this action, or a family of them: 'kind' is kind.change, kind.extend, …"),
    actor: str | None = Query(None, max_length=64, description="only what this user did"),
    _: InstructorUser,
    db: SessionDep,
) -> list[AuditRow]:
    """The newest entries first; ``action`` and ``actor`` narrow them on the server (issue 49: a
    TA looking for who re-ran a job should not page through a term of kind changes)."""
    q = select(AuditEntry)
    if action:
        q = q.where(or_(AuditEntry.action == action, AuditEntry.action.startswith(action.rstrip(".") + ".", autoescape=True)))
    if actor:
        q = q.where(AuditEntry.actor == actor)
    rows = db.scalars(q.order_by(AuditEntry.id.desc()).limit(limit))
    return [AuditRow(at=r.at, actor=r.actor, action=r.action, target=r.target, detail=r.detail) for r in rows]


@router.post("/images/pull", response_model=PullRequest)
def pull_image(body: PullBody, svc: ServicesDep, p: InstructorUser, db: SessionDep) -> PullRequest:
    """Ask every worker to pull an image from its registry (on the worker host: jobs have no network)."""
    req = request_pull(svc.redis.sync, body.image)
    audit(db, p.user.username, "image.pull", req.image)
    db.commit()
    return req


@router.post("/images/load", response_model=list[PullRequest])
async def load_image(request: Request, p: InstructorUser, svc: ServicesDep) -> list[PullRequest]:
    """Body: a `docker save` tar. Every worker downloads it from here and loads it (no registry needed)."""
    tmp, sha, _ = await svc.storage.receive(request.stream(), svc.settings.max_image_bytes, "the image archive (RAI_MAX_IMAGE_BYTES)")

    def _keep() -> list[PullRequest]:
        names = tar_images(tmp)
        dest = blob_path(svc.storage, sha)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp.replace(dest)
        reqs = [request_pull(svc.redis.sync, name, blob=sha) for name in names]
        with svc.db.session() as db:
            audit(db, p.user.username, "image.load", ", ".join(names), sha256=sha)
            db.commit()
        return reqs

    try:
        return await run_in_threadpool(_keep)
    finally:
        tmp.unlink(missing_ok=True)


def _course_out(row: CourseBuild) -> CourseBuildOut:
    spec = course.spec_of(row)
    return CourseBuildOut(
        kind=row.kind,
        version=row.version,
        installed_by=row.installed_by,
        installed_at=row.installed_at,
        image=spec.image,
        student_files=spec.ranked.student_files,
        timed=spec.ranked.timed,
        measure=spec.ranked.measure,
        repeats=spec.ranked.repeats,
        passes=spec.ranked.passes,
        reference=spec.ranked.reference or "",
        rtol=spec.ranked.rtol,
    )


@router.put("/course/{kind}", response_model=CourseBuildOut)
def install_course_build(kind: str, body: CourseBuildIn, p: InstructorUser, db: SessionDep, svc: ServicesDep) -> CourseBuildOut:
    """A new version of a ranked kind's build file: submissions from now on run it (issue 23)."""
    row = course.install(db, kind, body.build_file, body.labels, p.user.username, svc.settings.ranked_kind_set)
    audit(db, p.user.username, "course.install", kind, version=row.version)
    db.commit()
    return _course_out(row)


@router.get("/course", response_model=list[CourseBuildOut])
def course_builds(_: StaffUser, db: SessionDep, svc: ServicesDep) -> list[CourseBuildOut]:
    """The build file each ranked kind runs now."""
    rows = [course.current(db, kind) for kind in sorted(svc.settings.ranked_kind_set)]
    return [_course_out(row) for row in rows if row is not None]


@router.post("/jobs/{job_id}/remeasure", response_model=JobOut)
def remeasure_job(job_id: str, p: StaffUser, db: SessionDep, svc: ServicesDep, repeats: int = Query(10, ge=2, le=20)) -> JobOut:
    """Measure a ranked entry again (issue 32): more timed runs on an idle GPU; its result replaces
    the original's on the board once it ends. Audited."""
    original = db.get(Job, job_id)
    if original is None:
        raise NotFound("no such job")
    job = remeasure(db, svc, original, p.user, repeats)
    return job_out(db, job, QueueView(db, svc.settings))


@router.post("/jobs/{job_id}/rerun", response_model=JobOut)
def rerun_job(job_id: str, p: StaffUser, db: SessionDep, svc: ServicesDep) -> JobOut:
    """Run an ended job again (issue 49): the same archive and build file, a new job of the same
    owner and kind; audited (who re-ran what)."""
    job = rerun(db, svc, visible_job(db, p, job_id), p.user)
    return job_out(db, job, QueueView(db, svc.settings))
