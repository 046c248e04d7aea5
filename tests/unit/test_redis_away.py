"""Redis out of reach (restarting, paused, killed) is passing: a request that needs it answers 503
with Retry-After and one line in the server's log, and a log stream ends without ``end`` (the
client resumes it) with one line, not a 500 and two tracebacks per reader (bench/redis-outage.txt:
169 tracebacks for 1.5 s without Redis)."""

from __future__ import annotations

import base64
import logging
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from helpers.rows import add_job

from raiprotocol.models import JobState
from raiserver.access.auth import create_user
from raiserver.app import create_app
from raiserver.config import Settings
from raiserver.parts import services_of

NOWHERE = "redis://127.0.0.1:1/0"  # nothing listens: refused at once


@pytest.fixture
def client(tmp_path: Path):
    app = create_app(Settings(data_dir=tmp_path, database_url=f"sqlite:///{tmp_path}/t.sqlite3", redis_url=NOWHERE))
    svc = services_of(app)
    with svc.db.session() as db:
        user, secret = create_user(db, "ann")
        job = add_job(db, user)
        job.state = JobState.running
        db.commit()
        app.state.job_id = job.id
        auth = "Basic " + base64.b64encode(f"{user.access_key}:{secret}".encode()).decode()
    yield TestClient(app, headers={"Authorization": auth}), app.state.job_id
    svc.db.engine.dispose()


def test_a_log_stream_without_redis_ends_for_the_client_to_resume_with_one_line_logged(client, caplog):
    http, job_id = client
    with caplog.at_level(logging.WARNING, logger="raiserver"):
        r = http.get(f"/api/v1/jobs/{job_id}/log", params={"follow": "false"})
    assert r.status_code == 200 and "event: end" not in r.text and "event: lines" not in r.text
    said = [rec.getMessage() for rec in caplog.records]
    assert [m for m in said if "cut: Redis unavailable" in m] and not [m for m in said if "unhandled" in m], said
    assert not [rec for rec in caplog.records if rec.exc_info], "a traceback was logged"


def test_a_request_that_needs_redis_answers_503_with_retry_after(client, caplog):
    http, job_id = client
    with caplog.at_level(logging.WARNING, logger="raiserver"):
        r = http.post(f"/api/v1/jobs/{job_id}/cancel")
    assert r.status_code == 503, r.text
    assert r.headers["retry-after"] == "2" and "log store (Redis) is unavailable" in r.json()["detail"]
    assert not [rec for rec in caplog.records if rec.exc_info], "a traceback was logged"
