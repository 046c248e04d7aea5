"""Every endpoint × every role × someone else's ids: allowed, 401, 403, or 404 (no existence leak).

The table below must name every route the app has: a new endpoint without a row fails this test.
"""

from __future__ import annotations

import functools
import inspect
import re
from typing import Any

import httpx
import pytest
from helpers import make_project

from raiprotocol.profile import read_profile_file

pytestmark = pytest.mark.timeout(240)

ROLES = ["anon", "owner", "other", "ta", "instructor", "admin", "worker"]
USERS = ["owner", "other", "ta", "instructor", "admin"]
STAFF = {"ta", "instructor", "admin"}
ALLOWED = "allowed"  # any status but 401/403/404
BLOB = "ab" * 32
NO_KEEPALIVE = httpx.Limits(max_keepalive_connections=0)  # a fresh connection per request: no idle-timeout races


def any_user(role):
    return ALLOWED if role in USERS else 401


def owner_or_staff(role):
    if role in ("anon", "worker"):
        return 401
    return ALLOWED if role == "owner" or role in STAFF else 404


def staff(role):
    if role in ("anon", "worker"):
        return 401
    return ALLOWED if role in STAFF else 403


def instructor(role):
    if role in ("anon", "worker"):
        return 401
    return ALLOWED if role in ("instructor", "admin") else 403


def worker(role):
    return ALLOWED if role == "worker" else 401


def public(role):
    return ALLOWED


# web pages use the session cookie; without one they send you to /login (303)
def web_user(role):
    return ALLOWED if role in USERS else 303


def web_staff(role):
    return ALLOWED if role in STAFF else (403 if role in USERS else 303)


def web_instructor(role):
    return ALLOWED if role in ("instructor", "admin") else (403 if role in USERS else 303)


def web_owner_or_staff(role):
    return ALLOWED if role == "owner" or role in STAFF else (404 if role in USERS else 303)


def web_team_only(role):
    """A student asks for a regrade of their team's run; staff answer, they do not ask (403)."""
    if role in STAFF:
        return 403
    return ALLOWED if role == "owner" else (404 if role in USERS else 303)


def web_events(role):
    return ALLOWED if role in USERS else 401


MATRIX = {
    ("GET", "/healthz"): public,
    ("GET", "/client/"): public,  # the client, for anyone to download (issue 37)
    ("GET", "/client/{name}"): public,
    ("GET", "/metrics"): public,  # loopback (every test client) or RAI_METRICS_TOKEN
    ("GET", "/openapi.json"): public,
    ("GET", "/docs"): public,
    ("GET", "/docs/oauth2-redirect"): public,
    ("GET", "/redoc"): public,
    ("GET", "/api/v1/me"): any_user,
    ("POST", "/api/v1/jobs"): any_user,
    ("GET", "/api/v1/jobs"): any_user,
    ("GET", "/api/v1/queue"): any_user,
    ("GET", "/api/v1/images"): any_user,
    ("POST", "/api/v1/admin/images/pull"): instructor,  # without a body: 422, asks for nothing
    ("POST", "/api/v1/admin/images/load"): instructor,  # without a body: 422 (no manifest), loads nothing
    ("GET", "/api/v1/worker/images/{sha256}"): worker,
    ("PUT", "/api/v1/admin/course/{kind}"): instructor,  # without a body: 422, installs nothing
    ("GET", "/api/v1/admin/course"): staff,
    ("GET", "/api/v1/jobs/{job_id}"): owner_or_staff,
    ("POST", "/api/v1/jobs/{job_id}/cancel"): owner_or_staff,
    ("GET", "/api/v1/jobs/{job_id}/build.tar.gz"): owner_or_staff,
    ("DELETE", "/api/v1/jobs/{job_id}/files"): owner_or_staff,
    ("GET", "/api/v1/jobs/{job_id}/log"): owner_or_staff,
    ("GET", "/api/v1/jobs/{job_id}/log.txt"): owner_or_staff,
    ("GET", "/api/v1/leaderboard"): any_user,
    ("GET", "/api/v1/leaderboard.csv"): staff,
    ("GET", "/api/v1/leaderboard/quarantine"): staff,
    ("POST", "/api/v1/workers/heartbeat"): worker,
    ("GET", "/api/v1/workers"): staff,
    ("POST", "/api/v1/worker/jobs/{job_id}/claim"): worker,
    ("POST", "/api/v1/worker/jobs/{job_id}/state"): worker,
    ("GET", "/api/v1/worker/jobs/{job_id}/archive"): worker,
    ("PUT", "/api/v1/worker/jobs/{job_id}/build"): worker,
    ("POST", "/api/v1/worker/jobs/{job_id}/lease"): worker,
    ("PUT", "/api/v1/worker/jobs/{job_id}/log"): worker,
    ("POST", "/api/v1/admin/roster"): instructor,
    ("POST", "/api/v1/admin/users/{username}/keys"): instructor,
    ("POST", "/api/v1/admin/users/{username}/revoke"): instructor,
    ("POST", "/api/v1/admin/jobs/{job_id}/remeasure"): staff,
    ("POST", "/api/v1/admin/jobs/{job_id}/rerun"): staff,  # issue 49: staff run a job again
    ("GET", "/api/v1/admin/users"): staff,
    ("POST", "/api/v1/jobs/{job_id}/regrade"): any_user,  # without a body: 422 for anyone, asks nothing, tells nothing
    ("GET", "/api/v1/regrades"): any_user,  # the caller's own
    ("GET", "/api/v1/admin/regrades"): staff,
    ("POST", "/api/v1/admin/similarity"): staff,  # without a body: 422, starts nothing
    ("GET", "/api/v1/admin/similarity"): staff,
    ("GET", "/api/v1/admin/similarity/{report_id}"): staff,  # "{report_id}" is no number: 422 for staff
    ("POST", "/api/v1/admin/regrades/{request_id}"): staff,  # without a body: 422, answers nothing
    ("GET", "/api/v1/admin/audit"): instructor,
    # kinds (issue 36), on 'dev', which has runs: it cannot be removed, and bodies left out change nothing (422)
    ("GET", "/api/v1/kinds"): any_user,
    ("GET", "/api/v1/limits"): any_user,
    ("PUT", "/api/v1/admin/kinds/{kind}"): instructor,
    ("DELETE", "/api/v1/admin/kinds/{kind}"): instructor,
    ("POST", "/api/v1/admin/kinds/{kind}/extensions"): instructor,
    ("GET", "/api/v1/admin/kinds/{kind}/extensions"): staff,
    ("DELETE", "/api/v1/admin/kinds/{kind}/extensions"): instructor,
    ("GET", "/api/v1/admin/grades/{kind}"): staff,
    ("GET", "/kinds"): web_user,
    ("POST", "/kinds"): web_instructor,  # without the kind's name: 422, changes nothing
    ("POST", "/kinds/extensions"): web_instructor,
    ("POST", "/kinds/grading"): web_instructor,
    ("POST", "/kinds/extensions/end"): web_instructor,
    ("GET", "/grades/{kind}.csv"): web_staff,
    ("GET", "/login"): public,
    ("POST", "/login"): public,
    ("POST", "/logout"): public,
    ("GET", "/"): public,
    ("GET", "/queue"): web_user,
    ("GET", "/web/queue/events"): web_events,
    ("GET", "/workers"): web_staff,
    ("GET", "/jobs/{job_id}"): web_owner_or_staff,
    ("POST", "/jobs/{job_id}/cancel"): web_owner_or_staff,
    ("POST", "/jobs/{job_id}/rerun"): web_staff,  # the job page's Run again button
    ("POST", "/jobs/{job_id}/regrade"): web_team_only,  # no message: 422 for the owner, asks nothing
    ("GET", "/regrades"): web_staff,
    ("GET", "/similarity"): web_staff,
    ("POST", "/similarity"): web_staff,  # no kind: 422 for staff, starts nothing
    ("GET", "/similarity/{report_id}"): web_staff,
    ("GET", "/similarity/{report_id}/pairs/{n}"): web_staff,
    ("POST", "/regrades/{request_id}"): web_staff,  # no action: 422 for staff, answers nothing
    ("GET", "/leaderboard"): web_user,
    ("GET", "/users/{username}"): web_owner_or_staff,
    ("GET", "/users"): web_staff,
}


# who each logged-in role is, as the dependencies see them
ROLE_OF = {"owner": "student", "other": "student", "ta": "ta", "instructor": "instructor", "admin": "admin"}
# routes whose refusal for some role is the handler's, not a dependency's, and why that is right
DECIDED_IN_THE_HANDLER = {
    ("POST", "/jobs/{job_id}/regrade"): "staff are refused (403) by can_request_regrade, a rule about the job's team",
    ("GET", "/web/queue/events"): "a stream checks its session itself: 401, not a redirect to the login page",
}


@functools.cache
def app_route_objects() -> dict[tuple[str, str], Any]:
    """Every (method, path) the application serves, with its route, walking included routers too."""
    import tempfile
    from pathlib import Path

    from raiserver.app import create_app
    from raiserver.config import Settings

    app = create_app(Settings(data_dir=Path(tempfile.mkdtemp())))
    found: dict[tuple[str, str], Any] = {}

    def walk(routes):
        for r in routes:
            inner = getattr(r, "original_router", None)
            if inner is not None:
                walk(inner.routes)
            elif getattr(r, "methods", None) and hasattr(r, "path"):
                for m in r.methods - {"HEAD"}:
                    found[(m, r.path)] = r

    walk(app.routes)
    return found


def app_routes() -> set[tuple[str, str]]:
    return set(app_route_objects())


def test_the_matrix_names_every_route():
    assert app_routes() == set(MATRIX), "add the new route(s) to MATRIX with who may call them"


def gate(route, role: str) -> int | None:
    """What a route's dependencies alone answer ``role`` (401, 303 to the login page, 403), or None
    where they let it through to the handler: the role rules are deps.py's, asked of a user of that role."""
    from raiserver.access.permissions import Principal
    from raiserver.api import deps
    from raiserver.errors import Forbidden
    from raiserver.store.tables import User

    def calls(dependant):
        for d in dependant.dependencies:
            yield d.call
            yield from calls(d)

    dependant = getattr(route, "dependant", None)  # a plain Starlette route (the docs) has none: public
    found = list(calls(dependant)) if dependant is not None else []
    if deps.require_worker in found:
        return None if role == "worker" else 401
    web, api = deps.web_user in found, deps.current_user in found
    if not (web or api):
        return None
    if role not in ROLE_OF:
        return 303 if web else 401
    p = Principal(User(id=1, username=f"mx_{role}", role=ROLE_OF[role], team=None, active=True))
    for call in found:
        if call in (deps.web_user, deps.current_user) or inspect.signature(call, eval_str=True).return_annotation is not Principal:
            continue
        try:
            call(p)  # a role dependency: takes who is calling, answers them or refuses (403)
        except Forbidden:
            return 403
    return None


def test_every_route_for_every_role_is_decided_by_its_dependencies():
    """Fast (no server): every route × every role, the refusals MATRIX promises come from the route's
    dependencies (StaffUser, InstructorUser, WebStaff, ...; rules from permissions.py), not from role
    checks in a handler's body, and no dependency refuses what MATRIX allows."""
    failures = []
    for (method, path), route in sorted(app_route_objects().items()):
        rule = MATRIX.get((method, path))
        assert rule is not None, f"{method} {path} is not in MATRIX"
        for role in ROLES:
            expected, got = rule(role), gate(route, role)
            if got is not None and got != expected:
                failures.append(f"{method} {path} as {role}: its dependencies answer {got}, MATRIX says {expected}")
            elif got is None and expected in (401, 303, 403) and (method, path) not in DECIDED_IN_THE_HANDLER:
                failures.append(f"{method} {path} as {role}: MATRIX says {expected} but no dependency refuses it (a check in the body?)")
    assert failures == []


def web_login(url: str, profile) -> httpx.Client:
    c = httpx.Client(base_url=url, timeout=30, limits=NO_KEEPALIVE)
    html = c.get("/login").text
    csrf = re.search(r'name="csrf" value="([^"]+)"', html).group(1)
    r = c.post("/login", data={"access_key": profile.access_key, "secret_key": profile.secret_key, "csrf": csrf})
    assert r.status_code == 303
    return c


DESTRUCTIVE_JOB = [""]


@pytest.fixture(scope="module")
def world(docker_service, tmp_path_factory):
    svc = docker_service
    profiles = {
        "owner": svc.add_user("mx_owner"),
        "other": svc.add_user("mx_other"),
        "ta": svc.add_user("mx_ta", role="ta"),
        "instructor": svc.add_user("mx_prof", role="instructor"),
        "admin": svc.profile,
    }
    svc.add_user("mx_victim")
    blob = svc.data / "storage" / "images" / f"{BLOB}.tar"  # an uploaded image archive workers may fetch
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(b"not really a tar")
    proj = make_project(tmp_path_factory.mktemp("mx") / "p", ["echo hi > out.txt"])
    res = svc.client("submit", "-p", str(proj), env={"RAI_PROFILE": str(profiles["owner"])})
    assert res.returncode == 0, res.stderr
    job_id = next(ln.split()[2] for ln in res.stdout.splitlines() if " queued on " in ln)
    # deleting a job's files is for good: that route gets a job of its own, so the others still find them
    res = svc.client("submit", "-p", str(proj), env={"RAI_PROFILE": str(profiles["owner"])})
    assert res.returncode == 0, res.stderr
    DESTRUCTIVE_JOB[0] = next(ln.split()[2] for ln in res.stdout.splitlines() if " queued on " in ln)
    return svc, profiles, job_id


def client_for(svc, profiles, role, web: bool) -> httpx.Client:
    if role == "worker":
        return httpx.Client(base_url=svc.url, headers={"Authorization": f"Bearer {svc.token}"}, timeout=30, limits=NO_KEEPALIVE)
    if role == "anon":
        return httpx.Client(base_url=svc.url, timeout=30, limits=NO_KEEPALIVE)
    p = read_profile_file(profiles[role])
    if web:
        return web_login(svc.url, p)
    return httpx.Client(base_url=svc.url, auth=(p.access_key, p.secret_key), timeout=30, limits=NO_KEEPALIVE)


@pytest.mark.parametrize("role", ROLES)
def test_every_route_for_every_role(world, role):
    svc, profiles, job_id = world
    api = client_for(svc, profiles, role, web=False)
    web = client_for(svc, profiles, role, web=True) if role in USERS else api
    owner_name = read_profile_file(profiles["owner"]).username
    failures = []
    for (method, path), rule in sorted(MATRIX.items()):
        expected = rule(role)
        is_web = not path.startswith("/api/") and path not in ("/healthz", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc")
        c = web if is_web else api
        url = path.replace("{job_id}", DESTRUCTIVE_JOB[0] if path.endswith("/files") else job_id).replace("{sha256}", BLOB)
        url = url.replace("{request_id}", "1").replace("{name}", "raiclient.pyz")
        url = url.replace("{username}", owner_name if path.startswith("/users/") else "mx_victim").replace("{kind}", "dev")
        kw: dict = {}
        if path == "/api/v1/admin/roster":
            kw = {"content": b"no,username,column\n", "headers": {"Content-Type": "text/csv"}}  # 422, changes nothing
        elif path.endswith("/revoke") or path.endswith("/keys"):
            pass  # acts on mx_victim only
        elif method in ("POST", "PUT") and path.startswith("/api/v1/worker"):
            blob = path.endswith("/build") or path.endswith("/worker/jobs/{job_id}/log")
            kw = {"params": {"attempt": 99}, "content": b""} if blob else {"json": {"worker": "x", "attempt": 99, "state": "running"}}
        elif method == "POST" and is_web and path not in ("/login", "/logout"):
            html = web.get("/queue").text if role in USERS else ""
            m = re.search(r'name="csrf" value="([^"]+)"', html)
            kw = {"data": {"csrf": m.group(1) if m else ""}}
        if path.endswith("/log") or path == "/web/queue/events":
            with c.stream(method, url, **kw) as r:
                status = r.status_code
        else:
            status = c.request(method, url, follow_redirects=False, **kw).status_code
        redirected_to_login = is_web and method == "GET" and status == 303 and path != "/"
        ok = (status not in (401, 403, 404) and not redirected_to_login) if expected == ALLOWED else status == expected
        if not ok:
            failures.append(f"{method} {path} as {role}: got {status}, expected {expected}")
    assert failures == []
