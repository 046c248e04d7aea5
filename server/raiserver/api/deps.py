"""Every FastAPI dependency of the API and the web view, as annotated types (``db: SessionDep``,
``p: CurrentUser``, ``svc: ServicesDep``): who is calling, with which rights, the request's database
session and the app's parts. One place, so a handler's signature says what it needs; the rules
themselves are permissions.py's and the credentials' auth.py's."""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBasic, HTTPBasicCredentials, HTTPBearer
from sqlalchemy.orm import Session

from raiserver.access.auth import Principal, authenticate, client_ip, session_user, too_many_failures
from raiserver.access.permissions import is_instructor
from raiserver.config import Settings
from raiserver.errors import Forbidden, TooManyAttempts, Unauthorized
from raiserver.jobs.lifecycle import Services
from raiserver.store.db import Database
from raiserver.store.tables import RevokedKey, User

basic = HTTPBasic(auto_error=False)
bearer = HTTPBearer(auto_error=False)
UNSAFE = ("POST", "PUT", "PATCH", "DELETE")


class LoginRequired(Exception):
    """A page needs a logged-in browser: the web view answers with the login page."""


def get_db(request: Request) -> Iterator[Session]:
    with request.app.state.db.session() as s:
        yield s


def services(request: Request) -> Services:
    return request.app.state.services


def settings(request: Request) -> Settings:
    return request.app.state.settings


def database(request: Request) -> Database:
    """For handlers that open short sessions of their own (streams, uploads) instead of one per request."""
    return request.app.state.db


def current_user(request: Request, creds: HTTPBasicCredentials | None = Depends(basic)) -> Principal:
    """Who is calling. Uses its own short session, so no database connection is held while a
    slow upload streams in (students on bad Wi-Fi must not exhaust the pool)."""
    with request.app.state.db.session() as db:
        user: User | None = None
        if creds is not None:
            # the secret first: a right one is always served, whatever others tried with this key or
            # from this address (a known access key must not lock its owner out); only wrong ones wait
            user = authenticate(db, creds.username, creds.password)
            if user is None:
                too_many_failures(request, creds.username)
                wait = request.app.state.login_limiter.failed(client_ip(request), creds.username)
                if wait is not None:
                    raise TooManyAttempts(f"too many failed logins; try again in {wait} s", wait)
                retired = db.get(RevokedKey, creds.username)
                detail = (f"this access key was {retired.reason} on {retired.at:%Y-%m-%d %H:%M} UTC; use your new profile or ask your instructor for one"
                          if retired else "unknown access key or wrong secret key")
                raise Unauthorized(detail)
        else:
            user = session_user(db, request)
            if user is not None and request.method in UNSAFE:
                # a browser sends the cookie with any request to us: a write needs the page's token
                expected = request.session.get("csrf", "")
                if not expected or not hmac.compare_digest(expected, request.headers.get("x-csrf-token", "")):
                    raise Forbidden("a cookie-authenticated write needs the X-CSRF-Token header")
        if user is None:
            raise Unauthorized("credentials required")
        if not user.active:
            raise Unauthorized(f"account {user.username} is deactivated", challenge=False)
        return Principal(user)


def require_staff(p: Principal = Depends(current_user)) -> Principal:
    if not p.is_staff:
        raise Forbidden("staff only")
    return p


def require_instructor(p: Principal = Depends(require_staff)) -> Principal:
    if not is_instructor(p.user.role):
        raise Forbidden("instructors and admins only")
    return p


def require_worker(request: Request, creds: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:
    token = request.app.state.settings.worker_token
    if creds is None or not hmac.compare_digest(creds.credentials.encode(), token.encode()):
        raise Unauthorized("worker token required", challenge=False)


def web_user(request: Request, db: Session = Depends(get_db)) -> Principal:
    """The browser's user; without a valid session, the login page."""
    user = session_user(db, request)
    if user is None:
        request.session.pop("user_id", None)
        raise LoginRequired()
    return Principal(user)


SessionDep = Annotated[Session, Depends(get_db)]
ServicesDep = Annotated[Services, Depends(services)]
SettingsDep = Annotated[Settings, Depends(settings)]
DatabaseDep = Annotated[Database, Depends(database)]
CurrentUser = Annotated[Principal, Depends(current_user)]
StaffUser = Annotated[Principal, Depends(require_staff)]
InstructorUser = Annotated[Principal, Depends(require_instructor)]
WebUser = Annotated[Principal, Depends(web_user)]
WORKER_ONLY = [Depends(require_worker)]  # a route's ``dependencies=``: the worker's token, nothing to pass on
