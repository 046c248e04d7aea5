"""The students' API: submit, look, follow, download, cancel."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from fastapi import APIRouter, Header, HTTPException, Query, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, StreamingResponse
from sqlalchemy import func, select
from sqlalchemy.orm import Session
from sse_starlette.sse import EventSourceResponse

from raiprotocol.models import JobList, JobOut, JobState, QueueSummary, UserOut

from ..auth import Principal
from ..errors import DomainError
from ..fleet import live_workers
from ..jobs import QueueView, cancel_job, job_out, shown_state
from ..logstream import log_events, plain_text
from ..submissions import accept_submission
from ..tables import Job, User
from .deps import CurrentUser, SessionDep, services

router = APIRouter(prefix="/api/v1", tags=["jobs"])


def can_see(p: Principal, job: Job) -> bool:
    if p.is_staff or job.owner_id == p.user.id:
        return True
    return bool(p.user.team) and job.owner.team == p.user.team


def visible_job(db: Session, p: Principal, job_id: str) -> Job:
    """The job if this user may see it; 404 otherwise, so ids of others' jobs leak nothing."""
    job = db.get(Job, job_id)
    if job is None or not can_see(p, job):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no job {job_id} (or not yours)")
    return job


def job_snapshot(request: Request, p: Principal, job_id: str) -> Callable[[], JobOut]:
    """The job as this user may see it, read with a short session of its own (for streams that
    outlive any one database session)."""
    def snapshot() -> JobOut:
        with request.app.state.db.session() as db:
            return job_out(db, visible_job(db, p, job_id), QueueView(db, request.app.state.settings))

    return snapshot


def user_out(user: User) -> UserOut:
    return UserOut(username=user.username, role=user.role, firstname=user.firstname, lastname=user.lastname, email=user.email, team=user.team)


@router.get("/me", response_model=UserOut)
def me(p: CurrentUser) -> UserOut:
    return user_out(p.user)


@router.post("/jobs", response_model=JobOut, status_code=status.HTTP_201_CREATED)
async def submit(
    request: Request,
    *,
    queue: str | None = Query(None),
    kind: str = Query("dev"),
    content_length: int | None = Header(None),
    p: CurrentUser,
) -> JobOut:
    """Body: the project as a .tar.gz holding rai_build.yml at its top."""
    try:
        return await accept_submission(services(request), request.app.state.db, request.stream(), p.user.id,
                                       queue, kind, content_length)
    except DomainError as exc:
        request.app.state.counts.add("uploads_refused", exc.refusal)
        raise


@router.get("/jobs", response_model=JobList)
def history(
    request: Request,
    *,
    limit: int = Query(20, ge=1, le=500),
    everyone: bool = Query(False, alias="all"),
    p: CurrentUser,
    db: SessionDep,
) -> JobList:
    q = select(Job).order_by(Job.created_at.desc()).limit(limit)
    if not (everyone and p.is_staff):
        q = q.where(Job.owner_id == p.user.id)
    view = QueueView(db, services(request).settings)
    return JobList(jobs=[job_out(db, j, view) for j in db.scalars(q)])


@router.get("/queue", response_model=list[QueueSummary])
def queue_summary(request: Request, p: CurrentUser, db: SessionDep) -> list[QueueSummary]:
    """Every queue: jobs waiting and running, live workers and slots serving it, and the caller's
    own jobs in it with their positions."""
    dead_after = services(request).settings.worker_dead_after
    counts: Counter[tuple[str, JobState]] = Counter()
    held = Job.waiting.is_not(None)  # claimed, but still waiting in Slurm: shown as waiting
    for queue, state, waits, n in db.execute(select(Job.queue, Job.state, held, func.count()).where(
            Job.state.in_([JobState.queued, JobState.running])).group_by(Job.queue, Job.state, held)):
        counts[queue, shown_state(state, waits)] += n
    live = live_workers(db, dead_after)
    served = {q for w in live for q in (w.queues or [])}
    view = QueueView(db, services(request).settings)
    mine = db.scalars(select(Job).where(Job.owner_id == p.user.id,
                                        Job.state.in_([JobState.queued, JobState.running])).order_by(Job.created_at)).all()
    out = []
    for queue in sorted(served | {q for q, _ in counts} | {j.queue for j in mine}):
        serving = [w for w in live if queue in (w.queues or [])]
        out.append(QueueSummary(queue=queue, waiting=counts[queue, JobState.queued], running=counts[queue, JobState.running],
                                slots=sum(w.slots for w in serving), workers=len(serving),
                                mine=[job_out(db, j, view) for j in mine if j.queue == queue]))
    return out


@router.get("/jobs/{job_id}", response_model=JobOut)
def get_job(job_id: str, request: Request, p: CurrentUser, db: SessionDep) -> JobOut:
    return job_out(db, visible_job(db, p, job_id), QueueView(db, services(request).settings))


@router.post("/jobs/{job_id}/cancel", response_model=JobOut)
def cancel(job_id: str, request: Request, p: CurrentUser, db: SessionDep) -> JobOut:
    job = visible_job(db, p, job_id)
    cancel_job(db, services(request), job, p.user)
    db.refresh(job)
    return job_out(db, job, QueueView(db, services(request).settings))


@router.get("/jobs/{job_id}/build.tar.gz")
def build_folder(job_id: str, request: Request, p: CurrentUser, db: SessionDep) -> FileResponse:
    job = visible_job(db, p, job_id)
    path = services(request).storage.build_path(job.id)
    if not job.has_build or not path.exists():
        detail = "the job has not finished yet" if not job.state.finished else "this job left no build folder"
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail)
    return FileResponse(path, media_type="application/gzip", filename=f"build-{job.id}.tar.gz")


@router.get("/jobs/{job_id}/log")
async def log(
    job_id: str,
    request: Request,
    *,
    last_event_id: str | None = Header(None),
    after: int = Query(0, ge=0, description="resume after this line (same as Last-Event-ID)"),
    follow: bool = Query(True, description="false: send what exists, then `caught_up`, and stop"),
    p: CurrentUser,
) -> EventSourceResponse:
    """Server-Sent Events: `lines` (a batch; id = its last line's number), `status` while queued,
    then `end` with the job. A stream that ends without `end` was cut off: resume with
    Last-Event-ID."""
    svc = services(request)
    snapshot = job_snapshot(request, p, job_id)
    job = await run_in_threadpool(snapshot)
    start = max(after, int(last_event_id) if last_event_id and last_event_id.isdigit() else 0)
    hub = request.app.state.hub
    hub.admit(p.user.id, p.is_staff)
    return EventSourceResponse(log_events(svc, hub, job, start, snapshot, p.user.id, follow), ping=15, send_timeout=30)


@router.get("/jobs/{job_id}/log.txt")
async def log_text(job_id: str, request: Request, p: CurrentUser) -> StreamingResponse:
    """A finished job's whole log as plain text, streamed from disk page by page."""
    svc = services(request)
    job = await run_in_threadpool(job_snapshot(request, p, job_id))
    if not job.state.finished:
        raise HTTPException(status.HTTP_409_CONFLICT, f"job {job_id} has not finished; follow it with 'raiclient logs {job_id} --follow'")
    return StreamingResponse(plain_text(svc, job_id), media_type="text/plain; charset=utf-8",
                             headers={"Content-Disposition": f'attachment; filename="log-{job_id}.txt"'})
