"""The students' API: submit, look, follow, download, cancel."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable

from fastapi import APIRouter, Header, HTTPException, Query, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, StreamingResponse
from sqlalchemy import func, select
from sqlalchemy.orm import Session
from sse_starlette.sse import EventSourceResponse

from raiprotocol import logwire
from raiprotocol.logwire import END, Batch
from raiprotocol.models import JobList, JobOut, JobState, QueueSummary, UserOut

from ..auth import Principal
from ..errors import DomainError
from ..feed import LogHub, Shared
from ..fleet import live_workers
from ..jobs import QueueView, Services, cancel_job, job_out
from ..logs import PAGE_ENTRIES
from ..submissions import accept_submission
from ..tables import Job, User
from .deps import CurrentUser, SessionDep, services

router = APIRouter(prefix="/api/v1", tags=["jobs"])


def sse_json(model, **kw) -> str:
    """JSON with every non-ASCII character escaped: an SSE data field is split at any Unicode line
    break (U+2028, NEL…), which job output may well contain."""
    return json.dumps(model.model_dump(mode="json", **kw))


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
    counts: dict[str, dict[str, int]] = {}
    held = Job.waiting.is_not(None)  # claimed, but still waiting in Slurm: shown as waiting
    for queue, state, waits, n in db.execute(select(Job.queue, Job.state, held, func.count()).where(
            Job.state.in_([JobState.queued.value, JobState.running.value])).group_by(Job.queue, Job.state, held)):
        shown = JobState.queued.value if waits else state
        counts.setdefault(queue, {})[shown] = counts.get(queue, {}).get(shown, 0) + n
    live = live_workers(db, dead_after)
    served = {q for w in live for q in (w.queues or [])}
    view = QueueView(db, services(request).settings)
    mine = db.scalars(select(Job).where(Job.owner_id == p.user.id,
                                        Job.state.in_([JobState.queued.value, JobState.running.value])).order_by(Job.created_at)).all()
    out = []
    for queue in sorted(served | set(counts) | {j.queue for j in mine}):
        c = counts.get(queue, {})
        serving = [w for w in live if queue in (w.queues or [])]
        out.append(QueueSummary(queue=queue, waiting=c.get(JobState.queued.value, 0), running=c.get(JobState.running.value, 0),
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
        detail = "the job has not finished yet" if not JobState(job.state).finished else "this job left no build folder"
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

    async def text() -> AsyncIterator[bytes]:
        offset = 0
        while offset >= 0:
            batches, offset = await run_in_threadpool(svc.logs.stored_page, job_id, offset, 0)
            yield "".join(("".join(f"✱ {t}\n" for t in b.lines()) if b.s == "sys" else b.x + "\n") for b in batches).encode()

    return StreamingResponse(text(), media_type="text/plain; charset=utf-8",
                             headers={"Content-Disposition": f'attachment; filename="log-{job_id}.txt"'})


def lines_event(batches: list[Batch]) -> dict:
    return {"event": "lines", "id": str(batches[-1].last), "data": logwire.dumps(batches)}


async def stored_events(svc: Services, job_id: str, after: int) -> AsyncIterator[dict]:
    """The stored log after line ``after``, a page at a time from disk: bounded memory however
    long the log, nothing more read once the client is gone, and the reading and encoding done
    off the event loop (the server keeps answering everyone else meanwhile)."""
    def page(offset: int) -> tuple[dict | None, int]:
        batches, offset = svc.logs.stored_page(job_id, offset, after, max_bytes=256 * 1024)
        return (lines_event(batches) if batches else None), offset

    offset = 0
    while offset >= 0:
        event, offset = await run_in_threadpool(page, offset)
        if event:
            yield event


def merged_event(items: list[Shared], sent: int) -> tuple[dict | bytes | None, int]:
    """One SSE event for every batch that arrived since the last one, re-using the data encoded
    once for all watchers; only a batch that overlaps what this reader already has is cut."""
    if len(items) == 1 and items[0].batches[0].n > sent:  # the usual case: the shared event as is
        return items[0].frame, items[0].batches[-1].last
    parts: list[str] = []
    last = sent
    for shared in items:
        if shared.batches[-1].last <= last:
            continue
        if shared.batches[0].n > last:
            parts.append(shared.data[1:-1])
        else:
            fresh = [b for b in (x.after(last) for x in shared.batches) if b is not None]
            parts.append(logwire.dumps(fresh)[1:-1])
        last = shared.batches[-1].last
    if not parts:
        return None, sent
    return {"event": "lines", "id": str(last), "data": "[" + ",".join(parts) + "]"}, last


async def log_events(svc: Services, hub: LogHub, job: JobOut, sent: int, snapshot, user_id: int,
                     follow: bool = True) -> AsyncIterator[dict]:
    w = None
    try:
        if job.state.finished:
            async for event in stored_events(svc, job.id, sent):
                yield event
            yield {"event": "end", "data": sse_json(job)}
            return
        w = await hub.watch(job.id)
        if job.state is JobState.queued:
            yield {"event": "status", "data": sse_json(job, include={"state", "position", "eta_seconds", "worker"})}
        top = hub.position(job.id)
        while True:  # what was written before this watcher joined
            page = await svc.logs.apage(job.id, sent)
            lines = [b for b in page if b.s != END]
            if lines:
                yield lines_event(lines)
                sent = lines[-1].last
            if len(lines) != len(page):
                yield {"event": "end", "data": sse_json(await run_in_threadpool(snapshot))}
                return
            if len(page) < PAGE_ENTRIES or sent >= top:
                break
        if not follow:
            yield {"event": "caught_up", "data": sse_json(job, include={"state", "position", "eta_seconds", "worker"})}
            return
        while True:
            items = await w.next()
            event, sent = merged_event([payload for kind, payload in items if kind == "lines"], sent)
            if event:
                yield event
            for kind, payload in items:
                if kind == "status":
                    yield {"event": "status", "data": sse_json(payload, include={"state", "position", "eta_seconds", "worker"})}
                elif kind == "end":
                    yield {"event": "end", "data": sse_json(await run_in_threadpool(snapshot))}
                    return
                elif kind == "finished":  # no end marker came (Redis lost it): finish from storage
                    async for event in stored_events(svc, job.id, sent):
                        yield event
                    yield {"event": "end", "data": sse_json(payload)}
                    return
                elif kind == "cut":  # too slow a reader: it reconnects with Last-Event-ID
                    return
    finally:
        if w is not None:
            hub.unwatch(w)
        hub.release(user_id)
