"""The FastAPI application: wiring of settings, database, storage, logs, the fair-share release and routes."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import datetime, timezone

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from sqlalchemy import select
from sqlalchemy.orm import Session
from starlette.requests import ClientDisconnect

from raiserver import __version__
from raiserver.access.hardening import LoginLimiter, SecurityHeaders
from raiserver.access.uploadgate import UploadGate
from raiserver.api import pages
from raiserver.api.routes import admin as admin_routes
from raiserver.api.routes import jobs as jobs_routes
from raiserver.api.routes import leaderboard as leaderboard_routes
from raiserver.api.routes import workers as workers_routes
from raiserver.config import Settings, load_settings
from raiserver.errors import DomainError
from raiserver.fleet.dispatch import Dispatcher
from raiserver.jobs.fairshare import release_jobs
from raiserver.jobs.lifecycle import QueueView, Services, job_out, reap, release_again, restore_fences
from raiserver.live.feed import LogHub
from raiserver.live.logs import LogStore
from raiserver.ops import metrics
from raiserver.store.db import Database, migrate
from raiserver.store.storage import Storage
from raiserver.store.tables import Job

log = logging.getLogger("raiserver")


@contextmanager
def one_process_at_a_time(svc: Services, name: str, timeout: int) -> Iterator[bool]:
    """A Redis lock across every server process: yields whether this one holds it."""
    lock = svc.logs.redis.lock(f"rai:{name}-lock", timeout=timeout, blocking=False)
    if not lock.acquire():
        yield False
        return
    try:
        yield True
    finally:
        try:
            lock.release()
        except Exception:  # expired under a very slow pass: harmless
            pass


REAPER_LAST, REAPER_AWAKE = "rai:reaper:last", "rai:reaper:awake"


def awake_since(svc: Services, now: float) -> datetime:
    """When the reaper last resumed after not running for a while (this server process stopped,
    every process busy or away, Redis away or wiped): leases are judged only a full window after
    it, so the server's own stall is never taken for the workers' silence. Kept in Redis: any
    server process may hold the reaper's lock next."""
    r = svc.logs.redis
    last = r.getset(REAPER_LAST, now)
    stalled = max(3 * svc.settings.reaper_interval, 10.0)
    if last is None or now - float(last) > stalled:
        r.set(REAPER_AWAKE, now)
        if last is not None:
            log.warning("the reaper did not run for %.0f s: every running job's lease gets a fresh window", now - float(last))
    awake = r.get(REAPER_AWAKE)
    return datetime.fromtimestamp(float(awake) if awake else now, timezone.utc)


def reaper_pass(app: FastAPI, forget: bool = False) -> int:
    """One pass, by one server process at a time: fences Redis lost put back, runs whose lease
    lapsed requeued, and (``forget``) deliveries of dead workers dropped from Celery's keys."""
    svc: Services = app.state.services
    with one_process_at_a_time(svc, "reaper", 60) as mine:
        if not mine:
            return 0
        since = awake_since(svc, time.time())
        with app.state.db.session() as db:
            restore_fences(db, svc)
            n = reap(db, svc, since)
            if forget:
                gone = svc.dispatcher.forget_stale(svc.logs.redis, lambda job_id, attempt: _stale(db, job_id, attempt))
                if gone:
                    log.info("dropped %d delivery(ies) held by workers that died", gone)
            return n


def _stale(db: Session, job_id: str, attempt: int) -> bool:
    job = db.get(Job, job_id)
    return job is None or job.state.finished or attempt < job.attempt


async def _reaper(app: FastAPI) -> None:
    svc: Services = app.state.services
    swept = 0.0  # the first pass sweeps at start
    while True:
        await asyncio.sleep(svc.settings.reaper_interval)
        forget = time.monotonic() - swept > 60
        if forget:  # temporary files a killed server process left
            swept = time.monotonic()
            try:
                n = await run_in_threadpool(svc.storage.sweep_tmp)
                if n:
                    log.warning("removed %d abandoned temporary file(s) from storage", n)
            except OSError:
                log.exception("sweeping temporary files failed")
        try:
            n = await run_in_threadpool(reaper_pass, app, forget)
            if n:
                log.warning("requeued %d job(s) whose run's lease lapsed", n)
        except Exception:  # keep reaping whatever one pass hit
            log.exception("reaper pass failed")


def dispatch_pass(app: FastAPI) -> int:
    """One fair-share release pass, by one server process at a time (a Redis lock)."""
    svc: Services = app.state.services
    s = svc.settings
    with one_process_at_a_time(svc, "dispatch", 30) as mine:
        if not mine:
            return 0
        with app.state.db.session() as db:
            release_again(db, svc)
            return release_jobs(db, lambda job: svc.dispatcher.send(job.id, job.attempt, job.queue),
                            s.worker_dead_after, s.staff_priority, set(s.priority_kinds))


async def _dispatcher(app: FastAPI, wake: asyncio.Event) -> None:
    interval = app.state.settings.dispatch_interval
    while True:
        try:
            await asyncio.wait_for(wake.wait(), timeout=interval)
        except asyncio.TimeoutError:
            pass
        wake.clear()
        try:
            await run_in_threadpool(dispatch_pass, app)
        except Exception:  # the database or Redis may be restarting: try again next round
            log.exception("dispatch pass failed")


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or load_settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    db = Database(settings.db_url)
    migrate(db.engine)
    storage = Storage(settings.data_dir / "storage")
    services = Services(
        settings=settings,
        storage=storage,
        logs=LogStore(settings.redis_url, storage, settings.log_ttl_seconds),
        dispatcher=Dispatcher(settings.redis_url, visibility_timeout=settings.visibility_timeout),
    )

    def job_states(ids: list[str]) -> dict:
        with db.session() as session:
            view = QueueView(session, settings)
            return {j.id: job_out(session, j, view) for j in session.scalars(select(Job).where(Job.id.in_(ids)))}

    hub = LogHub(services.logs, job_states, per_student=settings.streams_per_student, per_staff=settings.streams_per_staff,
                 per_process=settings.streams_per_process, buffer_lines=settings.stream_buffer_lines)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()

        def kick() -> None:
            loop.call_soon_threadsafe(wake.set)

        services.kick = kick
        tasks = [asyncio.create_task(_reaper(app)), asyncio.create_task(_dispatcher(app, wake)),
                 asyncio.create_task(metrics.flush_loop(app))]
        yield
        for task in tasks:
            task.cancel()
        await hub.close()
        await services.logs.aclose()
        db.engine.dispose()

    app = FastAPI(title="rai", version=__version__, lifespan=lifespan,
                  description="Submit GPU jobs, follow their logs live, get their build folders back.")
    app.state.settings = settings
    app.state.db = db
    app.state.services = services
    app.state.hub = hub
    app.state.counts = metrics.ProcessCounts()
    app.state.login_limiter = LoginLimiter(services.logs.redis, settings.login_failures_per_ip, settings.login_failures_per_key)
    app.state.upload_gate = UploadGate(services.logs.redis, settings.upload_attempts_per_minute, settings.uploads_in_flight)
    app.include_router(jobs_routes.router)
    app.include_router(workers_routes.router)
    app.include_router(leaderboard_routes.router)
    app.include_router(admin_routes.router)
    app.include_router(metrics.router)
    pages.install(app)
    app.add_middleware(SecurityHeaders)
    app.add_middleware(metrics.HttpCounts, counts=app.state.counts)

    @app.get("/healthz", tags=["meta"])
    def healthz() -> dict:
        return {"ok": True, "version": __version__}

    @app.exception_handler(DomainError)
    async def _refused(request: Request, exc: DomainError) -> Response:
        if pages.wants_page(request):  # a browser gets the page with a way back, as for HTTP errors
            return await run_in_threadpool(pages.error_page, request, exc.status, str(exc))
        return JSONResponse({"detail": str(exc)}, status_code=exc.status, headers=exc.headers)

    @app.exception_handler(ClientDisconnect)
    async def _gone(request: Request, exc: ClientDisconnect) -> Response:
        """The client went away mid-request (a killed client, a cut upload): nothing to answer, no traceback."""
        log.info("client gone during %s %s", request.method, request.url.path)
        return Response(status_code=400)

    @app.exception_handler(Exception)
    async def _unhandled(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return JSONResponse({"detail": "internal error; the operator can find it in the server log"}, status_code=500)

    return app
