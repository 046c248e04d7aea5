"""The students' API: submit, look, follow, download, cancel."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from fastapi import APIRouter, Header, Query, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, StreamingResponse
from sqlalchemy import select
from sqlalchemy.orm import joinedload
from sse_starlette.sse import EventSourceResponse

from raiprotocol.models import FilesFreed, JobList, JobOut, QueueSummary, UserOut
from raiserver.access.permissions import Principal, can_delete_run, can_see_all_jobs, exempt_from_limits
from raiserver.api.deps import CurrentUser, ServicesDep, SessionDep
from raiserver.api.logstream import HeldEventSourceResponse, HeldFileResponse, HeldStreamingResponse, log_events
from raiserver.errors import Conflict, DomainError, NotFound
from raiserver.jobs.lifecycle import cancel_job
from raiserver.jobs.lookup import cancellable_job, visible_job
from raiserver.jobs.retention import delete_files, usage
from raiserver.jobs.submissions import accept_submission
from raiserver.jobs.views import QueueView, job_out, summaries
from raiserver.parts import AppServices
from raiserver.store.tables import Job, User

router = APIRouter(prefix="/api/v1", tags=["jobs"])


def job_snapshot(svc: AppServices, p: Principal, job_id: str) -> Callable[[], JobOut]:
    """The job as this user may see it, read with a short session of its own (for streams that
    outlive any one database session); after its first answer, by that job's whole id, whatever
    start of it was given."""
    wanted = job_id

    def snapshot() -> JobOut:
        nonlocal wanted
        with svc.db.session() as db:
            out = job_out(db, visible_job(db, p, wanted), QueueView(db, svc.settings))
        wanted = out.id
        return out

    return snapshot


def user_out(user: User) -> UserOut:
    return UserOut(
        username=user.username, role=user.role, firstname=user.firstname, lastname=user.lastname, email=user.email, team=user.team
    )


@router.get("/me", response_model=UserOut)
def me(p: CurrentUser, svc: ServicesDep) -> UserOut:
    return user_out(p.user).model_copy(update={"max_upload_bytes": svc.settings.max_upload_bytes})


@router.post("/jobs", response_model=JobOut, status_code=status.HTTP_201_CREATED)
async def submit(
    request: Request,
    *,
    queue: str | None = Query(None),
    kind: str = Query("dev"),
    content_length: int | None = Header(None),
    idempotency_key: str | None = Header(None),
    p: CurrentUser,
    svc: ServicesDep,
) -> JobOut:
    """Body: the project as a .tar.gz holding rai_build.yml at its top. ``Idempotency-Key``: one per
    submission; an upload sent again with it answers with the job the first one made, if it did."""
    try:
        gate = None if exempt_from_limits(p.user, svc.settings) else svc.upload_gate
        return await accept_submission(svc, svc.db, request.stream(), p.user.id, queue, kind, content_length, gate, idempotency_key)
    except DomainError as exc:
        svc.counts.add("uploads_refused", exc.refusal)
        raise


@router.get("/jobs", response_model=JobList)
def history(
    *,
    limit: int = Query(20, ge=1, le=500),
    everyone: bool = Query(False, alias="all"),
    p: CurrentUser,
    db: SessionDep,
    svc: ServicesDep,
) -> JobList:
    q = select(Job).options(joinedload(Job.owner)).order_by(Job.created_at.desc()).limit(limit)  # owners with the jobs: not one query each
    if not (everyone and can_see_all_jobs(p)):
        q = q.where(Job.owner_id == p.user.id)
    view = QueueView(db, svc.settings)
    return JobList(jobs=[job_out(db, j, view) for j in db.scalars(q)])


@router.get("/queue", response_model=list[QueueSummary])
def queue_summary(p: CurrentUser, db: SessionDep, svc: ServicesDep) -> list[QueueSummary]:
    """Every queue: jobs waiting and running, live workers and slots serving it, and the caller's
    own jobs in it with their positions."""
    return summaries(db, svc.settings, p.user)


@router.get("/jobs/{job_id}", response_model=JobOut)
def get_job(job_id: str, p: CurrentUser, db: SessionDep, svc: ServicesDep) -> JobOut:
    return job_out(db, visible_job(db, p, job_id), QueueView(db, svc.settings))


@router.post("/jobs/{job_id}/cancel", response_model=JobOut)
def cancel(job_id: str, p: CurrentUser, db: SessionDep, svc: ServicesDep) -> JobOut:
    job = cancellable_job(db, p, job_id)
    if job.state.finished:
        when = f" at {job.finished_at:%Y-%m-%d %H:%M:%S} UTC" if job.finished_at else ""
        raise Conflict(f"job {job.id} already {job.state.value.replace('_', ' ')}{when}: nothing was cancelled")
    cancel_job(db, svc, job, p.user)
    db.refresh(job)
    return job_out(db, job, QueueView(db, svc.settings))


@router.delete("/jobs/{job_id}/files", response_model=FilesFreed)
def delete_job_files(job_id: str, p: CurrentUser, db: SessionDep, svc: ServicesDep) -> FilesFreed:
    """Free storage: the finished job's archive and build folder go; its log and results stay.
    A run of the verified kind is kept for grading unless staff delete it."""
    job = cancellable_job(db, p, job_id)  # 404 or 403 (the same words as cancelling) first
    settings = svc.settings
    if not can_delete_run(p, job, settings.verified_kind):
        raise Conflict(f"job {job.id} is a '{job.kind}' run: it is kept for grading")
    freed = delete_files(db, svc.storage, job)
    left = usage(db, p.user.id)
    return FilesFreed(job_id=job.id, freed_bytes=freed, stored_bytes=left.total, quota_bytes=settings.storage_mb_per_student * 1024**2)


@router.get("/jobs/{job_id}/build.tar.gz")
async def build_folder(job_id: str, p: CurrentUser, svc: ServicesDep) -> FileResponse:
    """The job's /build as it ended; sent as one of the caller's open log streams (page by page from
    disk, after the answer started: outside admission, so capped as streams are)."""

    def find() -> tuple[str, Path | None, bool]:
        with svc.db.session() as db:
            job = visible_job(db, p, job_id)
            path = svc.storage.build_path(job.id)
            return job.id, path if job.has_build and path.exists() else None, job.state.finished

    jid, path, finished = await run_in_threadpool(find)
    if path is None:
        raise NotFound("this job left no build folder" if finished else "the job has not finished yet")
    release = svc.hub.admit(p.user.id, p.many_log_streams)
    return HeldFileResponse(path, release=release, media_type="application/gzip", filename=f"build-{jid}.tar.gz")


@router.get("/jobs/{job_id}/log")
async def log(
    job_id: str,
    request: Request,
    *,
    last_event_id: str | None = Header(None),
    after: int = Query(0, ge=0, description="resume after this line (same as Last-Event-ID)"),
    follow: bool = Query(True, description="false: send what exists, then `caught_up`, and stop"),
    p: CurrentUser,
    svc: ServicesDep,
) -> EventSourceResponse:
    """Server-Sent Events: `lines` (a batch; id = its last line's number), `status` while queued,
    then `end` with the job. A stream that ends without `end` was cut off: resume with
    Last-Event-ID."""
    snapshot = job_snapshot(svc, p, job_id)
    job = await run_in_threadpool(snapshot)
    start = max(after, int(last_event_id) if last_event_id and last_event_id.isdigit() else 0)
    release = svc.hub.admit(p.user.id, p.many_log_streams)
    events = log_events(svc, svc.hub, job, start, snapshot, follow)
    return HeldEventSourceResponse(events, release=release, ping=15, send_timeout=30)


@router.get("/jobs/{job_id}/log.txt")
async def log_text(job_id: str, p: CurrentUser, svc: ServicesDep) -> StreamingResponse:
    """A finished job's whole log as plain text, streamed from disk page by page; it counts as one
    of the caller's open log streams while it is sent."""
    job = await run_in_threadpool(job_snapshot(svc, p, job_id))
    if not job.state.finished:
        raise Conflict(f"job {job.id} has not finished; follow it with 'raiclient logs {job.id} --follow'")
    release = svc.hub.admit(p.user.id, p.many_log_streams)
    return HeldStreamingResponse(
        svc.logs.stored_text(job.id),
        release=release,
        media_type="text/plain; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="log-{job.id}.txt"'},
    )
