"""Which of the server's modules a request goes through (issue 47's measure of shape): one request
on a real app (SQLite, a private Redis), every Python call made meanwhile recorded (sys.setprofile
in every thread: the handlers' dependencies run in a thread pool), and the calls into raiserver's
own code listed in order as modules and rooms (raiserver's sub-packages): the calls rai's code makes
into rai's code, and the framework's into the routes (a library's callbacks, such as SQLAlchemy's
type conversions, and the middleware around every request left out; the framework's calls into
a dependency are counted wherever the dependency lives; a coroutine or generator resumed after an
await or a yield is the call it was, not a new one). "Comes back": a call into
a room the request had already left for another one (calls only; a function returning to its
caller is not counted).

    .venv/bin/python bench/route_trace.py                  # GET /api/v1/jobs/{id}/log of a finished job
    .venv/bin/python bench/route_trace.py --path /api/v1/jobs/{id}  # another route of the same job
"""

from __future__ import annotations

import argparse
import base64
import inspect
import sys
import tempfile
import threading
from pathlib import Path
from types import FrameType
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from term_pages import private_redis  # noqa: E402 - beside this file

# the ASGI middleware around every request and each of its messages (counts, security headers,
# admission and its fair turns), and what it calls: not the route's path
MIDDLEWARE = ("HttpCounts", "SecurityHeaders")
MIDDLEWARE_MODULES = ("raiserver.access.admission",)
# what calls a route, its dependencies (wherever they live) and the functions it hands to a thread
FRAMEWORK = ("fastapi.", "starlette.", "anyio.", "sse_starlette.")
RESUMABLE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


def _middleware(frame: FrameType) -> bool:
    return frame.f_code.co_qualname.startswith(MIDDLEWARE)


def collapse(names: list[str]) -> list[str]:
    out: list[str] = []
    for n in names:
        if not out or out[-1] != n:
            out.append(n)
    return out


def comebacks(seq: list[str]) -> int:
    seen: set[str] = set()
    n = 0
    for i, name in enumerate(seq):
        if name in seen and (i == 0 or seq[i - 1] != name):
            n += 1
        seen.add(name)
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--path", default="/api/v1/jobs/{id}/log")
    args = ap.parse_args()

    from fastapi.testclient import TestClient

    from raiprotocol.models import JobState
    from raiprotocol.spec import parse_spec
    from raiserver.access.auth import create_user
    from raiserver.app import create_app
    from raiserver.config import Settings

    spec_text = "rai:\n  version: 0.2\n  image: rai/busybox:latest\ncommands:\n  build:\n    - echo hi\n"
    with private_redis() as (redis_url, _), tempfile.TemporaryDirectory() as tmp:
        settings = Settings(db_url=f"sqlite:///{tmp}/t.sqlite3", redis_url=redis_url, data_dir=Path(tmp) / "data")
        app = create_app(settings)
        svc = app.state.services
        with svc.db.session() as db:
            user, secret = create_user(db, "ann")
            db.commit()
            from raiserver.jobs import lifecycle

            job = lifecycle.create_job(db, svc, user, parse_spec(spec_text), spec_text, "0" * 64, 10, "gpu", "dev")
            for i in range(20):
                svc.logs.system(job.id, f"line {i}")
            try:
                from raiserver.jobs.finish import Outcome, finish_job

                finish_job(db, svc, job, Outcome(JobState.succeeded))
            except ImportError:  # before issue 47's jobs/finish.py
                lifecycle.finish_job(db, svc, job, JobState.succeeded)  # type: ignore[attr-defined]
            job_id, key = job.id, user.access_key
        auth = "Basic " + base64.b64encode(f"{key}:{secret}".encode()).decode()
        # no lifespan (the background loops would be traced too): each request runs in a thread made
        # for it, which takes the profile set before it starts
        client = TestClient(app)
        client.get(args.path.format(id=job_id), headers={"Authorization": auth})  # warm: imports, caches
        calls: list[str] = []
        resumable: set[FrameType] = set()  # a coroutine's or generator's frame, seen at its first entry

        def profile(frame: FrameType, event: str, arg: Any) -> None:
            if event == "call":
                if frame.f_code.co_flags & RESUMABLE:
                    if frame in resumable:
                        return  # resumed after an await or a yield: the same call going on, not a new one
                    resumable.add(frame)
                name = frame.f_globals.get("__name__", "")
                if not name.startswith("raiserver.") or name in MIDDLEWARE_MODULES or frame.f_code.co_qualname.startswith(MIDDLEWARE):
                    return
                back = frame.f_back
                if back is not None and (back.f_globals.get("__name__") in MIDDLEWARE_MODULES or _middleware(back)):
                    return  # the middleware's own work (counting the answer)
                caller = back.f_globals.get("__name__", "") if back else ""
                if caller.startswith("raiserver.") or name.startswith("raiserver.api.") or caller.startswith(FRAMEWORK):
                    calls.append(name)  # rai's code calling rai's, or the framework a route or a dependency (not a library's callback)

        threading.setprofile(profile)
        sys.setprofile(profile)
        try:
            r = client.get(args.path.format(id=job_id), headers={"Authorization": auth})
        finally:
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]
        assert r.status_code == 200, r.text
    modules = collapse(calls)
    rooms = collapse([m.split(".")[1] for m in calls])
    print(f"GET {args.path}: {len(calls)} calls into raiserver")
    print(f"modules: {len(set(modules))} entered, {comebacks(modules)} comebacks")
    print(f"rooms:   {len(set(rooms))} entered, {comebacks(rooms)} comebacks")
    print("room path: " + " -> ".join(rooms))
    print("module path: " + " -> ".join(m.removeprefix("raiserver.") for m in modules))


if __name__ == "__main__":
    main()
