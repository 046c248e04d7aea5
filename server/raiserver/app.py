"""The FastAPI application: the process's services made once, the background loops started, the routes
and pages mounted. The composition root: the one module that knows every layer."""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from sqlalchemy import select
from sqlalchemy.orm import joinedload

from raiserver import __version__
from raiserver.access.admission import Admission
from raiserver.access.auth import key_tag
from raiserver.access.hardening import LoginLimiter, SecurityHeaders
from raiserver.access.uploadgate import UploadGate
from raiserver.api import errors
from raiserver.api.main import api_router
from raiserver.api.pages import site
from raiserver.config import Settings, load_settings
from raiserver.fleet.dispatch import Dispatcher
from raiserver.jobs.views import QueueView, job_out, queue_rows
from raiserver.live.feed import LogHub
from raiserver.live.logs import LogStore
from raiserver.live.queuefeed import QueueFeed, Rows, Sessions
from raiserver.ops import metrics
from raiserver.parts import AppServices, services_of
from raiserver.services.reaper import Reaper
from raiserver.services.release import Release
from raiserver.services.similarity import Similarity
from raiserver.services.warm import Warm
from raiserver.store.db import Database, migrate
from raiserver.store.lane import Lane
from raiserver.store.redisconn import RedisService
from raiserver.store.storage import Storage
from raiserver.store.tables import Job, User

log = logging.getLogger("raiserver")


def make_services(settings: Settings) -> AppServices:
    """The process's parts, each made once: the database (migrated), storage, Redis, the log store
    and its live fan-out, the queue feed, the limiters."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    db = Database(settings.db_url)
    migrate(db.engine)
    storage = Storage(settings.data_dir / "storage")
    redis_service = RedisService(settings.redis_url)
    logs = LogStore(redis_service, storage, settings.log_ttl_seconds)

    def job_states(ids: list[str]) -> dict[str, Any]:
        with db.session() as session:
            view = QueueView(session, settings)
            jobs = session.scalars(select(Job).options(joinedload(Job.owner)).where(Job.id.in_(ids)))  # one query for every owner
            return {j.id: job_out(session, j, view) for j in jobs}

    def queue_and_sessions(watchers: list[int]) -> tuple[Rows, Sessions]:
        with db.session() as session:
            users = session.execute(select(User.id, User.active, User.access_key).where(User.id.in_(watchers))).all()
            return queue_rows(session, settings), {u.id: (u.active, key_tag(u.access_key)) for u in users}

    return AppServices(
        settings=settings,
        storage=storage,
        redis=redis_service,
        logs=logs,
        dispatcher=Dispatcher(settings.redis_url, visibility_timeout=settings.visibility_timeout),
        db=db,
        queue_lane=Lane(settings.db_url, settings.redis_url),
        hub=LogHub(
            logs,
            job_states,
            per_student=settings.streams_per_student,
            per_staff=settings.streams_per_staff,
            per_process=settings.streams_per_process,
            buffer_lines=settings.stream_buffer_lines,
        ),
        queue_feed=QueueFeed(queue_and_sessions),
        login_limiter=LoginLimiter(redis_service.sync, settings.login_failures_per_ip, settings.login_failures_per_key),
        upload_gate=UploadGate(redis_service.sync, settings.upload_attempts_per_minute, settings.uploads_in_flight),
    )


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """The background loops run while the process serves; its connections close when it stops."""
    svc = services_of(app)
    loop = asyncio.get_running_loop()
    wake = asyncio.Event()

    def kick() -> None:
        loop.call_soon_threadsafe(wake.set)

    svc.kick = kick
    tasks = [
        asyncio.create_task(Reaper(svc).start()),
        asyncio.create_task(Release(svc, wake).start()),
        asyncio.create_task(metrics.flush_loop(app)),
        asyncio.create_task(Similarity(svc).start()),
    ]
    if svc.settings.warm_seconds:
        tasks.append(asyncio.create_task(Warm(svc).start()))
    # what the process made to start (modules, the app, its routes: ~200,000 objects) is kept
    # for good: out of the collector's full passes, which otherwise took ~150 ms every few
    # requests of a page that makes many objects (issue 52: a user page's p95 180 ms, p50 45 ms)
    gc.collect()
    gc.freeze()
    yield
    for task in tasks:
        task.cancel()
    await svc.hub.close()
    await svc.redis.aclose()
    svc.db.engine.dispose()
    svc.queue_lane.close()


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or load_settings()
    app = FastAPI(
        title="rai",
        version=__version__,
        lifespan=lifespan,
        description="Submit GPU jobs, follow their logs live, get their build folders back.",
    )
    app.state.services = make_services(settings)  # the one place; read through raiserver.parts.services_of
    app.include_router(api_router)
    app.include_router(metrics.router)
    site.install(app, settings)
    # innermost of the middlewares below (added first): a request's turn covers what the app computes
    app.add_middleware(
        Admission, worker_token=settings.worker_token, at_once=settings.requests_at_once, per_caller=settings.requests_per_caller
    )
    app.add_middleware(SecurityHeaders, hsts_seconds=settings.hsts_seconds)
    app.add_middleware(metrics.HttpCounts, counts=app.state.services.counts)
    errors.install(app)

    @app.get("/healthz", tags=["meta"])
    async def healthz() -> dict[str, Any]:
        """On the event loop, not in the thread pool: it answers while every worker thread is busy
        (a process at its limit: bench/fleet_sim.py saw /healthz wait 20-47 s behind the pool)."""
        return {"ok": True, "version": __version__}

    return app
