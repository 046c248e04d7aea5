"""Every FastAPI dependency of the API and the web view, as annotated types (``db: SessionDep``,
``p: CurrentUser``, ``svc: ServicesDep``): who is calling, with which rights, the request's database
session and the process's parts (settings included: ``svc.settings``). One place, so a handler's signature says what it needs; the rules
themselves are permissions.py's and the credentials' auth.py's."""

from __future__ import annotations

import hmac
from collections.abc import Callable, Iterator
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBasic, HTTPBasicCredentials, HTTPBearer
from sqlalchemy.orm import Session

from raiserver.access.auth import authenticate, client_ip, session_user
from raiserver.access.csrf import check_csrf
from raiserver.access.permissions import (
    Principal,
    can_answer_regrades,
    can_manage_course,
    can_rerun,
    can_see_grades,
    can_see_people,
    can_see_staff_pages,
    can_see_workers,
)
from raiserver.errors import Forbidden, TooManyAttempts, Unauthorized
from raiserver.parts import AppServices, services
from raiserver.store.tables import RevokedKey, User

basic = HTTPBasic(auto_error=False)
bearer = HTTPBearer(auto_error=False)
UNSAFE = ("POST", "PUT", "PATCH", "DELETE")


class LoginRequired(Exception):
    """A page needs a logged-in browser: the web view answers with the login page."""


def get_db(svc: AppServices = Depends(services)) -> Iterator[Session]:
    """The request's database session, committed and closed when the handler returns, before the
    response is sent (``DB``'s scope): a slow client reading it holds no connection and no row lock
    (a roster import's locks once lasted until its answer was sent). Handlers that must hold none
    while a client is slow (streams, uploads) open short ones of their own from ``svc.db``."""
    with svc.db.session() as s:
        yield s


def current_user(request: Request, svc: AppServices = Depends(services), creds: HTTPBasicCredentials | None = Depends(basic)) -> Principal:
    """Who is calling. Uses its own short session, so no database connection is held while a
    slow upload streams in (students on bad Wi-Fi must not exhaust the pool)."""
    with svc.db.session() as db:
        user: User | None = None
        if creds is not None:
            # the secret first: a right one is always served, whatever others tried with this key or
            # from this address (a known access key must not lock its owner out); only wrong ones wait
            user = authenticate(db, creds.username, creds.password)
            if user is None:
                wait = svc.login_limiter.refuse(client_ip(request), creds.username)
                if wait is not None:
                    raise TooManyAttempts(f"too many failed logins; try again in {wait} s", wait)
                retired = db.get(RevokedKey, creds.username)
                detail = (
                    f"this access key was {retired.reason} on {retired.at:%Y-%m-%d %H:%M} UTC; "
                    "use your new profile or ask your instructor for one"
                    if retired
                    else "unknown access key or wrong secret key"
                )
                raise Unauthorized(detail)
        else:
            user = session_user(db, request)
            if user is not None and request.method in UNSAFE:
                check_csrf(request, request.headers.get("x-csrf-token", ""), "a cookie-authenticated write needs the X-CSRF-Token header")
        if user is None:
            raise Unauthorized("credentials required")
        if not user.active:
            raise Unauthorized(f"account {user.username} is deactivated", challenge=False)
        return Principal(user)


def require_staff(p: Principal = Depends(current_user)) -> Principal:
    if not can_see_staff_pages(p):
        raise Forbidden("staff only")
    return p


def require_instructor(p: Principal = Depends(require_staff)) -> Principal:
    """Staff first (a student is told "staff only"), then instructors and admins."""
    if not can_manage_course(p):
        raise Forbidden("instructors and admins only")
    return p


async def require_worker(svc: AppServices = Depends(services), creds: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:
    """The worker token, on the event loop: a worker's report takes no thread of the students' (store/lane.py)."""
    token = svc.settings.worker_token
    if creds is None or not hmac.compare_digest(creds.credentials.encode(), token.encode()):
        raise Unauthorized("worker token required", challenge=False)


DB = Depends(get_db, scope="function")  # every use of the request's session: one session, ended before the response


def web_user(request: Request, db: Session = DB) -> Principal:
    """The browser's user; without a valid session, the login page."""
    user = session_user(db, request)
    if user is None:
        request.session.pop("user_id", None)
        raise LoginRequired()
    return Principal(user)


def web_only(rule: Callable[[Principal], bool], refusal: str) -> Callable[[Principal], Principal]:
    """A page or form for those permissions.py's ``rule`` admits: anyone else's browser is told
    ``refusal`` (403), before anything in the request (its form, its CSRF token) is read."""

    def admitted(p: Principal = Depends(web_user)) -> Principal:
        if not rule(p):
            raise Forbidden(refusal)
        return p

    return admitted


SessionDep = Annotated[Session, DB]
ServicesDep = Annotated[AppServices, Depends(services)]
CurrentUser = Annotated[Principal, Depends(current_user)]
StaffUser = Annotated[Principal, Depends(require_staff)]
InstructorUser = Annotated[Principal, Depends(require_instructor)]
WebUser = Annotated[Principal, Depends(web_user)]
WebStaff = Annotated[Principal, Depends(web_only(can_see_staff_pages, "this page is for staff"))]
WebWorkersViewer = Annotated[Principal, Depends(web_only(can_see_workers, "the workers page is for staff"))]
WebPeopleViewer = Annotated[Principal, Depends(web_only(can_see_people, "the users list is for staff"))]
WebGradesViewer = Annotated[Principal, Depends(web_only(can_see_grades, "grades are for staff"))]
WebRegradesViewer = Annotated[Principal, Depends(web_only(can_answer_regrades, "only staff see the regrade requests"))]
WebRegradeAnswerer = Annotated[Principal, Depends(web_only(can_answer_regrades, "only staff answer regrade requests"))]
WebRerunner = Annotated[Principal, Depends(web_only(can_rerun, "only staff run a job again"))]
WebInstructor = Annotated[Principal, Depends(web_only(can_manage_course, "only instructors change kinds"))]
WORKER_ONLY = [Depends(require_worker)]  # a route's ``dependencies=``: the worker's token, nothing to pass on
