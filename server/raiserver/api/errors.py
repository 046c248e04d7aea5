"""What a refused, failed or cut-off request answers: a domain refusal its status (a browser the
page with a way back), a client gone nothing, the database or Redis away 503 with Retry-After,
anything else 500 without a traceback to the caller (the operator finds it in the server log)."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from starlette.requests import ClientDisconnect

from raiserver.api.pages import site
from raiserver.errors import DatabaseUnavailable, DomainError, LogStoreUnavailable
from raiserver.store.db import AWAY_TYPES, away
from raiserver.store.redisconn import REDIS_AWAY

log = logging.getLogger("raiserver")


async def _refused(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, DomainError)
    if site.wants_page(request):  # a browser gets the page with a way back, as for HTTP errors
        return await run_in_threadpool(site.error_page, request, exc.status, str(exc))
    return JSONResponse({"detail": str(exc)}, status_code=exc.status, headers=exc.headers)


async def _gone(request: Request, exc: Exception) -> Response:
    """The client went away mid-request (a killed client, a cut upload): nothing to answer, no traceback."""
    log.info("client gone during %s %s", request.method, request.url.path)
    return Response(status_code=400)


async def _unhandled(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return JSONResponse({"detail": "internal error; the operator can find it in the server log"}, status_code=500)


def _passing(request: Request, what: str, exc: Exception, refused: DomainError) -> Response:
    """A part of the service out of reach for now: 503 with Retry-After and one line in the log,
    not a 500 and a traceback for every request that met it."""
    log.warning("%s unavailable on %s %s: %s", what, request.method, request.url.path, str(exc).split("\n", 1)[0])
    return JSONResponse({"detail": str(refused)}, status_code=refused.status, headers=refused.headers)


async def _database_away(request: Request, exc: Exception) -> Response:
    """The database out of reach (killed, restarting, its pool exhausted) is passing: 503 with
    Retry-After, as JSON even for a browser (the error page itself reads the database)."""
    if not away(exc):
        return await _unhandled(request, exc)
    return _passing(request, "database", exc, DatabaseUnavailable())


async def _redis_away(request: Request, exc: Exception) -> Response:
    """Redis out of reach (restarting, paused, killed) is passing too."""
    return _passing(request, "Redis", exc, LogStoreUnavailable())


def install(app: FastAPI) -> None:
    app.add_exception_handler(DomainError, _refused)
    app.add_exception_handler(ClientDisconnect, _gone)
    app.add_exception_handler(Exception, _unhandled)
    for kind in AWAY_TYPES:
        app.add_exception_handler(kind, _database_away)
    for kind in REDIS_AWAY:
        app.add_exception_handler(kind, _redis_away)
