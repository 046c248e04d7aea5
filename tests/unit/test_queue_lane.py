"""What drains the queue never waits behind students (raiserver.store.lane), and no request's
locks outlast it: on the real PostgreSQL, through the real app (issue 52, the hostile review of
2026-11-29)."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio.to_thread
import httpx
import pytest
from helpers import GOOD_SPEC, fresh_pg
from sqlalchemy import exc, select, update

from raiprotocol.models import JobState
from raiserver.access.auth import create_user
from raiserver.app import create_app
from raiserver.config import Settings
from raiserver.parts import AppServices, services_of
from raiserver.services.release import dispatch_pass
from raiserver.store.db import Database, away, migrate
from raiserver.store.tables import Job, User

TOKEN = "lane-test-worker-token"


@pytest.fixture
def pg() -> Iterator[str]:
    """A database of its own: a roster import deactivates every student it does not name."""
    made = fresh_pg()
    yield next(made)
    next(made, None)


@pytest.fixture
def app(tmp_path: Path, pg: str, redis_url: str) -> Iterator[Any]:
    application = create_app(Settings(data_dir=tmp_path, database_url=pg, redis_url=redis_url, worker_token=TOKEN))
    svc = services_of(application)
    with svc.db.session() as db:
        teacher, secret = create_user(db, "lane_teacher", role="instructor")
        application.state.test_auth = (teacher.access_key, secret)
    yield application
    svc.db.engine.dispose()
    svc.queue_lane.close()


HEARTBEAT = {"name": "lane-w1", "queues": ["gpu"], "executor": "process", "slots": 2, "busy": 0, "running": []}


def test_a_workers_report_and_the_release_pass_go_through_while_students_hold_every_thread_and_connection(app: Any) -> None:
    """Every one of anyio's threads busy, every connection of the process's database pool and of
    its Redis pool checked out (a flood of students' requests and log streams): a worker's heartbeat,
    claim and lease are answered and a release pass runs at once, while a student's request waits.
    Before the lane all of them waited for a student's thread; before the lane's own Redis, for a
    student's Redis connection (up to 20 s)."""
    svc: AppServices = services_of(app)
    with svc.db.session() as db:
        owner = db.scalar(select(User).where(User.username == "lane_teacher"))
        assert owner is not None
        job = Job(
            id="lanejob-1",
            owner_id=owner.id,
            queue="gpu",
            state=JobState.queued,
            archive_sha256="0" * 64,
            spec_yaml=GOOD_SPEC.decode(),
            image="rai/busybox:latest",
        )
        db.add(job)
        db.commit()
    pool = svc.db.engine.pool
    held = [svc.db.engine.connect() for _ in range(pool.size() + pool._max_overflow)]  # type: ignore[attr-defined]
    redis_pool = svc.redis.sync.connection_pool
    held_redis = [redis_pool.get_connection() for _ in range(redis_pool.max_connections)]  # type: ignore[attr-defined]

    async def main() -> tuple[int, float, bool, int]:  # the heartbeat's status and time, the student's
        limiter = anyio.to_thread.current_default_thread_limiter()
        borrowers = [object() for _ in range(int(limiter.total_tokens))]
        for b in borrowers:
            await limiter.acquire_on_behalf_of(b)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://rai") as c:
            student = asyncio.create_task(c.get("/api/v1/jobs", auth=app.state.test_auth))
            started = time.monotonic()
            beat = await asyncio.wait_for(
                c.post("/api/v1/workers/heartbeat", json=HEARTBEAT, headers={"Authorization": f"Bearer {TOKEN}"}), 10
            )
            worker = {"Authorization": f"Bearer {TOKEN}"}
            claim = {"worker": "lane-w1", "attempt": 1}
            got = await asyncio.wait_for(c.post("/api/v1/worker/jobs/lanejob-1/claim", json=claim, headers=worker), 10)
            assert got.status_code == 200, got.text
            renewed = await asyncio.wait_for(c.post("/api/v1/worker/jobs/lanejob-1/lease", json=claim, headers=worker), 10)
            assert renewed.status_code == 200, renewed.text
            answered = time.monotonic() - started
            await asyncio.wait_for(
                svc.queue_lane.run(dispatch_pass, svc.in_lane()), 10
            )  # the release pass: no thread nor connection of theirs
            student_waited = not student.done()
            for b in borrowers:
                limiter.release_on_behalf_of(b)
            for conn in held:
                conn.close()
            for rc in held_redis:
                redis_pool.release(rc)
            student_status = (await asyncio.wait_for(student, 30)).status_code
        return beat.status_code, answered, student_waited, student_status

    status, answered, student_waited, student_status = asyncio.run(main())
    assert status == 200 and answered < 5, (status, answered)
    assert student_waited, "the student's request had a thread after all: the test proves nothing"
    assert student_status == 200


def test_a_roster_import_is_committed_before_its_answer_is_sent(app: Any) -> None:
    """A request's session ends when its handler does: a client that reads the answer slowly (or
    never) holds no row lock. The roster import's users exist for everyone at the first byte of its
    answer; they used to be committed after the answer was sent."""
    svc: AppServices = services_of(app)
    key, secret = app.state.test_auth
    seen: list[bool] = []
    body = b"username,name,team\nlane_student1,One,t1\n"
    auth = base64.b64encode(f"{key}:{secret}".encode())
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/api/v1/admin/roster",
        "raw_path": b"/api/v1/admin/roster",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"rai"), (b"content-type", b"text/csv"), (b"authorization", b"Basic " + auth)],
        "client": ("127.0.0.1", 5000),
        "server": ("rai", 80),
    }

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            with Database(svc.db.url).session() as other:  # another connection: only what is committed
                seen.append(other.scalar(select(User.id).where(User.username == "lane_student1")) is not None)
            assert message["status"] == 200, message

    asyncio.run(app(scope, receive, send))
    assert seen == [True], "the roster's new user was not committed when its answer began"


def test_a_statement_waiting_on_a_row_lock_gives_up_and_says_the_database_is_busy(pg: str) -> None:
    """A lock that is never let go (a request stuck holding it) costs a waiter the bound, not for ever."""
    holder, waiter = Database(pg), Database(pg, lock_timeout_ms=300)
    migrate(holder.engine)
    with holder.session() as db:
        create_user(db, "lane_locked")
    try:
        with holder.session() as a:
            a.execute(update(User).where(User.username == "lane_locked").values(firstname="held"))
            started = time.monotonic()
            with pytest.raises(exc.OperationalError) as caught, waiter.session() as b:
                b.execute(update(User).where(User.username == "lane_locked").values(firstname="waited"))
            waited = time.monotonic() - started
            a.rollback()
        assert waited < 5, waited
        assert away(caught.value), "a lock timeout must answer 503 (try again), not 500"
    finally:
        holder.engine.dispose()
        waiter.engine.dispose()
