"""The FastAPI application: the process's services made once, the background loops started, the routes
and pages mounted. The composition root: the one module that knows every layer."""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from sqlalchemy import select
from starlette.requests import ClientDisconnect

from raiserver import __version__
from raiserver.access.auth import key_tag
from raiserver.access.hardening import LoginLimiter, SecurityHeaders
from raiserver.access.uploadgate import UploadGate
from raiserver.api import pages, regradepages, similaritypages, termpages
from raiserver.api.routes import admin as admin_routes
from raiserver.api.routes import client as client_routes
from raiserver.api.routes import grades as grades_routes
from raiserver.api.routes import jobs as jobs_routes
from raiserver.api.routes import kinds as kinds_routes
from raiserver.api.routes import leaderboard as leaderboard_routes
from raiserver.api.routes import regrades as regrade_routes
from raiserver.api.routes import similarity as similarity_routes
from raiserver.api.routes import workers as workers_routes
from raiserver.config import Settings, load_settings
from raiserver.errors import DatabaseUnavailable, DomainError
from raiserver.fleet.dispatch import Dispatcher
from raiserver.jobs.views import QueueView, job_out, queue_rows
from raiserver.live.feed import LogHub
from raiserver.live.logs import LogStore
from raiserver.live.queuefeed import QueueFeed, Rows, Sessions
from raiserver.ops import loops, metrics
from raiserver.services import AppServices
from raiserver.store.db import AWAY_TYPES, Database, away, migrate
from raiserver.store.redisconn import RedisService
from raiserver.store.storage import Storage
from raiserver.store.tables import Job, User

log = logging.getLogger("raiserver")


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or load_settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    db = Database(settings.db_url)
    migrate(db.engine)
    storage = Storage(settings.data_dir / "storage")
    redis_service = RedisService(settings.redis_url)
    logs = LogStore(redis_service, storage, settings.log_ttl_seconds)

    def job_states(ids: list[str]) -> dict[str, Any]:
        with db.session() as session:
            view = QueueView(session, settings)
            return {j.id: job_out(session, j, view) for j in session.scalars(select(Job).where(Job.id.in_(ids)))}

    def queue_and_sessions(watchers: list[int]) -> tuple[Rows, Sessions]:
        with db.session() as session:
            users = session.execute(select(User.id, User.active, User.access_key).where(User.id.in_(watchers))).all()
            return queue_rows(session, settings), {u.id: (u.active, key_tag(u.access_key)) for u in users}

    svc = AppServices(
        settings=settings,
        storage=storage,
        redis=redis_service,
        logs=logs,
        dispatcher=Dispatcher(settings.redis_url, visibility_timeout=settings.visibility_timeout),
        db=db,
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
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()

        def kick() -> None:
            loop.call_soon_threadsafe(wake.set)

        svc.kick = kick
        tasks = [
            asyncio.create_task(loops.reaper(svc)),
            asyncio.create_task(loops.dispatcher(svc, wake)),
            asyncio.create_task(metrics.flush_loop(app)),
            asyncio.create_task(loops.similarity(svc)),
        ]
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
        db.engine.dispose()

    app = FastAPI(
        title="rai",
        version=__version__,
        lifespan=lifespan,
        description="Submit GPU jobs, follow their logs live, get their build folders back.",
    )
    app.state.services = svc  # the one place; read through raiserver.services.services_of
    app.include_router(jobs_routes.router)
    app.include_router(workers_routes.router)
    app.include_router(leaderboard_routes.router)
    app.include_router(admin_routes.router)
    app.include_router(client_routes.router)
    app.include_router(kinds_routes.router)
    app.include_router(grades_routes.router)
    app.include_router(regrade_routes.router)
    app.include_router(similarity_routes.router)
    app.include_router(metrics.router)
    pages.install(app, settings)
    app.include_router(termpages.router)
    app.include_router(regradepages.router)
    app.include_router(similaritypages.router)
    app.add_middleware(SecurityHeaders, hsts_seconds=settings.hsts_seconds)
    app.add_middleware(metrics.HttpCounts, counts=svc.counts)

    @app.get("/healthz", tags=["meta"])
    def healthz() -> dict[str, Any]:
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

    async def _database_away(request: Request, exc: Exception) -> Response:
        """The database out of reach (killed, restarting, its pool exhausted) is passing: 503 with
        Retry-After, as JSON even for a browser (the error page itself reads the database)."""
        if not away(exc):
            return await _unhandled(request, exc)
        log.warning("database unavailable on %s %s: %s", request.method, request.url.path, str(exc).split("\n", 1)[0])
        refused = DatabaseUnavailable()
        return JSONResponse({"detail": str(refused)}, status_code=refused.status, headers=refused.headers)

    for kind in AWAY_TYPES:
        app.add_exception_handler(kind, _database_away)

    return app
