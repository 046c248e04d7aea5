"""The workers' API (worker token): heartbeats, claims, state changes, blobs in and out. Each runs
its database work in the queue's lane (``store/lane.py``): threads and connections no student's
request can hold, so a backed-up API never holds up what drains the queue."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import FileResponse
from sqlalchemy import select
from sqlalchemy.orm import Session

from raiprotocol.models import Claim, ClaimGranted, Heartbeat, HeartbeatReply, JobUpdate, QueueImages, WorkerOut
from raiserver.api.deps import WORKER_ONLY, CurrentUser, ServicesDep, SessionDep, StaffUser
from raiserver.errors import Missing, NotFound, TooLarge
from raiserver.fleet.images import blob_path, wanted_by
from raiserver.fleet.workers import is_alive, queue_images, record_heartbeat
from raiserver.jobs.lifecycle import check_build_attempt, claim_job, note_build, reconcile, renew_lease, update_job
from raiserver.parts import AppServices
from raiserver.store.db import utcnow
from raiserver.store.storage import human_size
from raiserver.store.tables import Job, Worker

log = logging.getLogger("raiserver")
router = APIRouter(prefix="/api/v1", tags=["workers"])


def _heartbeat(db: Session, svc: AppServices, hb: Heartbeat) -> HeartbeatReply:
    w = record_heartbeat(db, hb)
    lost = reconcile(db, svc, hb.name, hb.running)
    if lost:
        log.warning("worker %s does not list %d job(s) it held: requeued", hb.name, lost)
    svc.kick()  # free slots may have appeared
    return HeartbeatReply(pull=wanted_by(svc.redis.sync, w.images))


@router.post("/workers/heartbeat", response_model=HeartbeatReply, dependencies=WORKER_ONLY)
async def heartbeat(hb: Heartbeat, svc: ServicesDep) -> HeartbeatReply:
    return await svc.queue_lane.in_session(_heartbeat, svc.in_lane(), hb)


@router.get("/workers", response_model=list[WorkerOut])
def workers(_: StaffUser, db: SessionDep, svc: ServicesDep) -> list[WorkerOut]:
    dead_after = svc.settings.worker_dead_after
    now = utcnow()
    return [
        WorkerOut(
            name=w.name,
            queues=w.queues,
            executor=w.executor,
            slots=w.slots,
            busy=w.busy,
            gpus=w.gpus,
            running=w.running,
            last_seen=w.last_seen.isoformat(),
            alive=is_alive(w, dead_after, now),
            jobs_done=w.jobs_done,
        )
        for w in db.scalars(select(Worker).order_by(Worker.name))
    ]


@router.get("/images", response_model=list[QueueImages])
def images(_: CurrentUser, db: SessionDep, svc: ServicesDep) -> list[QueueImages]:
    """What each queue can run: the images its live workers hold (what a build file may name)."""
    return queue_images(db, svc.settings.worker_dead_after)


@router.post("/worker/jobs/{job_id}/claim", response_model=ClaimGranted, dependencies=WORKER_ONLY)
async def claim(job_id: str, body: Claim, svc: ServicesDep) -> ClaimGranted:
    return await svc.queue_lane.in_session(claim_job, svc.in_lane(), job_id, body)


def _state(db: Session, svc: AppServices, job_id: str, body: JobUpdate) -> dict[str, Any]:
    return {"state": update_job(db, svc, job_id, body).state.value}


@router.post("/worker/jobs/{job_id}/state", dependencies=WORKER_ONLY)
async def state(job_id: str, body: JobUpdate, svc: ServicesDep) -> dict[str, Any]:
    return await svc.queue_lane.in_session(_state, svc.in_lane(), job_id, body)


def _lease(db: Session, svc: AppServices, job_id: str, body: Claim) -> dict[str, Any]:
    return {"cancel": renew_lease(db, svc, job_id, body.worker, body.attempt)}


@router.post("/worker/jobs/{job_id}/lease", dependencies=WORKER_ONLY)
async def lease(job_id: str, body: Claim, svc: ServicesDep) -> dict[str, Any]:
    """The run of ``body.attempt`` on ``body.worker`` renews its lease (409: it no longer holds the job)."""
    return await svc.queue_lane.in_session(_lease, svc.in_lane(), job_id, body)


def _archive(db: Session, svc: AppServices, job_id: str) -> FileResponse:
    job = db.get(Job, job_id)
    if job is None:
        raise NotFound("no such job")
    path = svc.storage.archive_path(job.archive_sha256)
    if not path.exists():
        raise Missing("the project archive is missing from storage")
    return FileResponse(path, media_type="application/gzip")


@router.get("/worker/jobs/{job_id}/archive", dependencies=WORKER_ONLY)
async def archive(job_id: str, svc: ServicesDep) -> FileResponse:
    return await svc.queue_lane.in_session(_archive, svc.in_lane(), job_id)


def _image_blob(svc: AppServices, sha256: str) -> FileResponse:
    if len(sha256) != 64 or not all(c in "0123456789abcdef" for c in sha256):
        raise NotFound("no such image archive")
    path = blob_path(svc.storage, sha256)
    if not path.exists():
        raise NotFound("no such image archive")
    return FileResponse(path, media_type="application/x-tar")


@router.get("/worker/images/{sha256}", dependencies=WORKER_ONLY)
async def image_blob(sha256: str, svc: ServicesDep) -> FileResponse:
    """A `docker save` tar staff uploaded, for workers to load."""
    return await svc.queue_lane.run(_image_blob, svc.in_lane(), sha256)


@router.put("/worker/jobs/{job_id}/build", dependencies=WORKER_ONLY)
async def upload_build(job_id: str, request: Request, svc: ServicesDep, attempt: int = Query(...)) -> dict[str, Any]:
    await svc.queue_lane.run(check_build_attempt, svc.queue_lane.db, job_id, attempt)
    limit = svc.settings.max_build_bytes
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:  # before a byte is read: the worker hears it at once
        raise TooLarge(f"the build folder is {human_size(int(declared))}, over the limit of {human_size(limit)} (RAI_MAX_BUILD_BYTES)")
    tmp, _, size = await svc.storage.receive(request.stream(), limit, "the build folder (RAI_MAX_BUILD_BYTES)")
    svc.storage.keep_build(tmp, job_id)
    await svc.queue_lane.run(note_build, svc.queue_lane.db, job_id, size)
    return {"bytes": size}


WORKER_COPY_BYTES = 64 * 1024**2  # a run's lines are capped at RAI_OUTPUT_BYTES (16 MiB) and rai's own lines


@router.put("/worker/jobs/{job_id}/log", dependencies=WORKER_ONLY)
async def upload_log(job_id: str, request: Request, svc: ServicesDep, attempt: int = Query(...)) -> dict[str, Any]:
    """The run's own copy of its lines, sent before its end when Redis lost some: the stored log is
    made whole from it as the job ends."""
    await svc.queue_lane.run(check_build_attempt, svc.queue_lane.db, job_id, attempt, True)
    tmp, _, size = await svc.storage.receive(request.stream(), WORKER_COPY_BYTES, "the worker's copy of the log")
    svc.storage.keep_worker_copy(tmp, job_id, attempt)
    return {"bytes": size}
