"""The web view: server-rendered pages (Jinja2) with small vanilla JS, live parts over SSE.

Login uses the same access/secret keys as the client and keeps a signed session cookie (HttpOnly,
SameSite=strict); every form carries a CSRF token bound to the session.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Form, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from sqlalchemy import select
from sqlalchemy.orm import Session
from sse_starlette.sse import EventSourceResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.sessions import SessionMiddleware

from raiprotocol.models import REGRADE_MESSAGE_CHARS
from raiprotocol.resultview import printed_facts, results_view
from raiprotocol.states import UNFINISHED
from raiprotocol.waits import wait_words
from raiserver.access.auth import authenticate, client_ip, key_tag, session_user
from raiserver.access.csrf import check_csrf, csrf_token
from raiserver.access.people import MAX_QUERY, find_people
from raiserver.access.permissions import ROLES, Principal, can_cancel, can_rerun, can_see_all_jobs, can_see_user
from raiserver.api.deps import LoginRequired, ServicesDep, SessionDep, WebPeopleViewer, WebRerunner, WebUser, WebWorkersViewer
from raiserver.api.logstream import HeldEventSourceResponse
from raiserver.config import Settings
from raiserver.errors import NotFound, Unauthorized
from raiserver.fleet.workers import is_alive
from raiserver.grading.kinds import Deadlines
from raiserver.grading.leaderboard import hidden, leaderboard, verdict
from raiserver.jobs import regrades
from raiserver.jobs.lifecycle import cancel_job, rerun
from raiserver.jobs.lookup import cancellable_job, visible_job
from raiserver.jobs.quotas import limits_of
from raiserver.jobs.views import QueueView, job_out, queue_snapshot, short_id, shown_to
from raiserver.parts import services_of
from raiserver.store.db import utcnow
from raiserver.store.summaries import summary_of
from raiserver.store.tables import Job, User, Worker

HERE = Path(__file__).parents[2]  # raiserver/, where the templates and static files live
templates = Jinja2Templates(directory=str(HERE / "templates"))


def duration(seconds: float) -> str:
    """A wait as the live pages write it (app.js dur): 45 s, 3 min 5 s, 1 h 2 min."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    return f"{s // 60} min {s % 60} s" if s < 3600 else f"{s // 3600} h {s % 3600 // 60} min"


templates.env.filters["short_id"] = short_id
templates.env.filters["duration"] = duration
templates.env.filters["wait_words"] = lambda job: wait_words(job.eta_low, job.eta_high, job.eta_guess, job.eta_seconds)
router = APIRouter(include_in_schema=False)
FORM_EXPIRED = "the form expired; reload the page and try again"


def render(request: Request, name: str, p: Principal | None, **ctx: Any) -> HTMLResponse:
    nonce = request.scope.get("state", {}).get("csp_nonce", "")
    return templates.TemplateResponse(request, name, {"me": p, "csrf": csrf_token(request), "nonce": nonce, **ctx})


@router.get("/login")
def login_page(request: Request, error: str | None = None) -> HTMLResponse:
    return render(request, "login.html", None, error=error)


@router.post("/login")
def login(
    request: Request,
    access_key: Annotated[str, Form()],
    secret_key: Annotated[str, Form()],
    csrf: Annotated[str, Form()],
    db: SessionDep,
    svc: ServicesDep,
) -> Response:
    check_csrf(request, csrf, FORM_EXPIRED)
    key = access_key.strip()
    user = authenticate(db, key, secret_key.strip())  # first: right keys are never refused by the limits
    if user is None or not user.active:
        wait = svc.login_limiter.refuse(client_ip(request), key)
        # the access key stays filled in (a wrong secret is the usual mistake), the secret never does
        if wait is not None:
            return render(request, "login.html", None, error=f"Too many failed logins; try again in {wait} s.", access_key=key)
        return render(request, "login.html", None, error="Unknown access key or wrong secret key.", access_key=key)
    request.session.clear()
    request.session["user_id"] = user.id
    request.session["key"] = key_tag(user.access_key)
    request.session["since"] = time.time()
    return RedirectResponse("/queue", status.HTTP_303_SEE_OTHER)


@router.post("/logout")
def logout(request: Request, csrf: Annotated[str, Form()], db: SessionDep) -> Response:
    """Ends this user's browser sessions for good, not only this cookie: a copy of the signed
    cookie would otherwise answer until it expires (12 h)."""
    check_csrf(request, csrf, FORM_EXPIRED)
    user = session_user(db, request)
    if user is not None:
        user.sessions_after = utcnow()
        db.commit()
    request.session.clear()
    return RedirectResponse("/login", status.HTTP_303_SEE_OTHER)


@router.get("/")
def home() -> Response:
    return RedirectResponse("/queue", status.HTTP_303_SEE_OTHER)


LATEST_JOBS = 5  # a student's own finished jobs on the queue page, where a login lands


@router.get("/queue")
def queue_page(request: Request, p: WebUser, db: SessionDep, svc: ServicesDep) -> HTMLResponse:
    """Everyone's running and waiting jobs, live (a student's own marked); for a student, their
    latest finished jobs above them (the page a login lands on was an empty table most of the day).
    Finished ones only: what runs or waits is in the live tables, and a card drawn once would go stale."""
    mine = None
    if not can_see_all_jobs(p):
        ended = (Job.owner_id == p.user.id) & Job.state.not_in(UNFINISHED)
        latest = db.scalars(select(Job).where(ended).order_by(Job.created_at.desc()).limit(LATEST_JOBS)).all()
        view = QueueView(db, svc.settings)
        mine = [job_out(db, j, view) for j in latest]
    return render(request, "queue.html", p, snapshot=queue_snapshot(db, svc.settings, p), mine=mine)


@router.get("/web/queue/events")
async def queue_events(request: Request, svc: ServicesDep) -> EventSourceResponse:
    def who() -> Principal:
        with svc.db.session() as db:
            user = session_user(db, request)
            if user is None:
                raise Unauthorized("log in first", challenge=False)
            return Principal(user)

    p = await run_in_threadpool(who)
    uid, everyone, tag = p.user.id, can_see_all_jobs(p), request.session.get("key")
    hub, feed = svc.hub, svc.queue_feed
    give_back = hub.admit(uid, p.many_log_streams)
    feed.watching[uid] += 1

    async def events() -> AsyncIterator[dict[str, str]]:
        last = None
        while True:
            rows, sessions = await feed.get()
            active, current = sessions.get(uid, (True, tag))
            if not active or current != tag:  # deactivated, or the key was rotated or revoked
                yield {"event": "logout", "data": "{}"}
                return
            text = json.dumps(shown_to(rows, uid, everyone), sort_keys=True)
            if text != last:
                last = text
                yield {"event": "queue", "data": text}
            await asyncio.sleep(1.0)

    def release() -> None:  # once the answer ends, however it ends
        feed.watching[uid] -= 1
        if feed.watching[uid] <= 0:
            del feed.watching[uid]
        give_back()

    return HeldEventSourceResponse(events(), release=release, ping=15)


@router.get("/workers")
def workers_page(request: Request, p: WebWorkersViewer, db: SessionDep, svc: ServicesDep) -> HTMLResponse:
    dead_after = svc.settings.worker_dead_after
    now = utcnow()
    rows = [
        {"w": w, "alive": is_alive(w, dead_after, now), "age": round((now - w.last_seen).total_seconds())}
        for w in db.scalars(select(Worker).order_by(Worker.name))
    ]
    return render(request, "workers.html", p, workers=rows)


def board_now(db: Session, settings: Settings, job: Job) -> dict[str, Any] | None:
    """A ranked run's place as the board stands now, with what it was told at its end (issue 49:
    "Ranked #1 of 1" stayed on the page after others ranked), and its re-measures, newest first."""
    summary = summary_of(job)
    said = summary.measured.verdict if summary and summary.measured else None
    if job.course_build_id is None or not said or not job.state.finished:
        return None
    again = list(db.scalars(select(Job).where(Job.remeasure_of == job.id).order_by(Job.created_at.desc())))
    return {"now": verdict(db, settings, job) or said, "at_end": said, "again": again}


@router.get("/jobs/{job_id}")
def job_page(job_id: str, request: Request, p: WebUser, db: SessionDep, svc: ServicesDep) -> HTMLResponse:
    job = visible_job(db, p, job_id)
    asked = regrades.for_job(db, job)
    out = job_out(db, job, QueueView(db, svc.settings))
    return render(
        request,
        "job.html",
        p,
        job=out,
        printed=printed_facts(results_view(out.results.model_dump(mode="json") if out.results else None)),
        spec=job.spec_yaml,
        can_cancel=can_cancel(p, job),
        can_rerun=can_rerun(p) and job.state.finished and job.archive_kept,
        board=board_now(db, svc.settings, job),
        regrades=[regrades.out(r) for r in asked],
        may_ask=regrades.may_ask(db, svc.settings, p, job, asked),
        message_chars=REGRADE_MESSAGE_CHARS,
        now=utcnow(),
    )


@router.post("/jobs/{job_id}/rerun")
def rerun_from_web(
    job_id: str, request: Request, csrf: Annotated[str, Form()], p: WebRerunner, db: SessionDep, svc: ServicesDep
) -> Response:
    """Staff's Run again button (issue 49): a new job from the same archive, audited; its page next."""
    check_csrf(request, csrf, FORM_EXPIRED)
    job = rerun(db, svc, visible_job(db, p, job_id), p.user)
    return RedirectResponse(f"/jobs/{job.id}", status.HTTP_303_SEE_OTHER)


@router.post("/jobs/{job_id}/cancel")
def cancel_from_web(job_id: str, request: Request, csrf: Annotated[str, Form()], p: WebUser, db: SessionDep, svc: ServicesDep) -> Response:
    check_csrf(request, csrf, FORM_EXPIRED)
    job = cancellable_job(db, p, job_id)
    cancel_job(db, svc, job, p.user)
    back = request.headers.get("referer") or f"/jobs/{job_id}"
    return RedirectResponse(back if back.startswith(str(request.base_url)) else f"/jobs/{job_id}", status.HTTP_303_SEE_OTHER)


@router.get("/leaderboard")
def leaderboard_page(request: Request, p: WebUser, db: SessionDep, svc: ServicesDep) -> HTMLResponse:
    entries = leaderboard(db, svc.settings, p)
    unverified = leaderboard(db, svc.settings, p, board="unverified")
    return render(
        request,
        "leaderboard.html",
        p,
        entries=entries,
        unverified=unverified,
        times=[round(e.op_time * 1000, 6) for e in entries],
        threshold=svc.settings.correctness_threshold,
        ranked_kinds=", ".join(sorted(svc.settings.ranked_kind_set)),
        policy=svc.settings.leaderboard_policy,
        only_mine=hidden(db, svc.settings, p),
    )


@router.get("/users")
def users_page(request: Request, p: WebPeopleViewer, db: SessionDep, q: str = "", role: str = "", active: str = "") -> HTMLResponse:
    """Staff find a student (issue 37): by any part of a name, email or team, a role, active or not."""
    people, total = find_people(db, q, role, active)
    return render(request, "users.html", p, people=people, total=total, q=q[:MAX_QUERY], role=role, active=active, roles=ROLES)


@router.get("/users/{username}")
def user_page(username: str, request: Request, p: WebUser, db: SessionDep, svc: ServicesDep) -> HTMLResponse:
    user = db.scalar(select(User).where(User.username == username))
    if user is None or not can_see_user(p, user):
        raise NotFound(f"no user {username}")
    jobs = db.scalars(select(Job).where(Job.owner_id == user.id).order_by(Job.created_at.desc()).limit(200)).all()
    view = QueueView(db, svc.settings)
    history = [
        {"t": j.finished_at.isoformat(), "s": r.op_time_total, "id": j.id}  # seconds, as the jobs' table below
        for j in reversed(jobs)
        if (r := summary_of(j)) and r.op_time_total is not None and j.finished_at
    ]
    return render(
        request,
        "user.html",
        p,
        user=user,
        jobs=[job_out(db, j, view) for j in jobs],
        history=history,
        limits=limits_of(db, user, svc.settings, Deadlines(db, svc.settings)),
    )


def install(app: FastAPI, settings: Settings) -> None:
    """Mount the pages, the static files and the login redirect on an app."""
    secure = settings.cookie_secure if settings.cookie_secure is not None else settings.public_url.startswith("https:")
    app.add_middleware(
        SessionMiddleware,
        secret_key=settings.session_secret,
        same_site="strict",
        https_only=secure,
        max_age=int(timedelta(hours=12).total_seconds()),
        session_cookie="rai_session",
    )
    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")
    app.include_router(router)

    @app.exception_handler(LoginRequired)
    async def _to_login(request: Request, exc: LoginRequired) -> Response:
        return RedirectResponse("/login", status.HTTP_303_SEE_OTHER)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if not wants_page(request):
            return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=getattr(exc, "headers", None))
        return await run_in_threadpool(error_page, request, exc.status_code, str(exc.detail))


TITLES = {403: "Not for you", 404: "Not found", 409: "Not possible now", 422: "Not accepted", 429: "Too many requests"}
NOT_PAGES = ("/api/", "/web/", "/static/", "/metrics", "/healthz", "/openapi.json", "/docs", "/redoc")


def wants_page(request: Request) -> bool:
    """A browser asking for a page (HTML errors with a way back); the API and streams keep JSON."""
    return not request.url.path.startswith(NOT_PAGES) and "text/html" in request.headers.get("accept", "")


def error_page(request: Request, code: int, detail: str) -> HTMLResponse:
    with services_of(request.app).db.session() as db:
        user = session_user(db, request)
        p = Principal(user) if user is not None else None
        if code == 404 and detail == "Not Found":
            detail = f"There is no page at {request.url.path}."
        back, label = ("/queue", "Back to the queue") if p else ("/login", "Log in")
        response = render(
            request, "error.html", p, title=TITLES.get(code, "Something went wrong"), detail=detail, back=back, back_label=label
        )
    response.status_code = code
    return response
