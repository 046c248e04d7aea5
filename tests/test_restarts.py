"""Issue 51: the service's own restarts are not the student's problem. A server killed while a
project uploads, or an upload's answer lost on the way back, ends with the job submitted exactly
once (the client uploads again from the start, saying so in one line, and the server knows a
retry by the submission's key); a database outage answers 503 with Retry-After, never 500, and
the client waits it out. The real service with the process executor or no worker (no Docker)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from helpers import Service, make_project, start_service, tar_gz, wait_for
from helpers.postgres import PrivatePostgres
from helpers.proxy import Proxy

pytestmark = pytest.mark.timeout(240)

MiB = 1024**2
RETRY_NOTE = "during the upload"  # the one line that says the upload goes again


def _jobs_of(svc: Service, profile: Path) -> list[dict]:
    with svc.http(profile) as h:
        return h.get("/api/v1/jobs", params={"limit": 50}).json()["jobs"]


def _notes(err: str) -> list[str]:
    return [line for line in err.splitlines() if RETRY_NOTE in line]


def test_a_server_killed_mid_upload_is_ridden_over_and_the_job_submitted_once(tmp_path, redis_url):
    """40 MiB over a link of 8 MiB/s; the server gets SIGKILL a quarter of the way and is started
    again: before, the client gave up at once ("cannot reach the rai server … is it running?")."""
    svc = start_service(tmp_path, redis_url, None, "process", slots=1)
    slow = Proxy(svc.port, rate=8 * MiB)
    try:
        ana = svc.add_user("ana")
        proj = make_project(tmp_path / "p", ["sh -c 'echo $((6 * 7)) apples'"])
        (proj / "weights.bin").write_bytes(os.urandom(40 * MiB))  # gzip cannot shrink it
        client = svc.popen_client("submit", "-p", str(proj), env={"RAI_PROFILE": str(ana), "RAI_SERVER": f"http://127.0.0.1:{slow.port}"})
        wait_for(lambda: slow.sent > 10 * MiB, timeout=90, what="a quarter of the upload")
        svc.stop("server", signal.SIGKILL)
        at_kill = slow.sent
        svc.start_server()
        out, err = client.communicate(timeout=150)
        jobs = _jobs_of(svc, ana)
    finally:
        slow.close()
        svc.shutdown()
    assert at_kill < 40 * MiB, f"the kill came after the whole upload ({at_kill} bytes had gone)"
    assert client.returncode == 0, out + err
    assert out.count("42 apples") == 1, out
    notes = _notes(err)
    assert len(notes) == 1 and "retrying" in notes[0], err
    assert "cannot reach" not in err and "Traceback" not in err, err
    assert len(jobs) == 1 and jobs[0]["state"] == "succeeded", jobs
    assert slow.sent > 40 * MiB + at_kill, "the upload did not go again from the start"


def test_an_upload_whose_answer_was_lost_is_submitted_once(tmp_path, redis_url):
    """The upload landed and the job was made, but its answer never came back: the client's retry
    carries the same submission key and gets that job back, not a second one."""
    svc = start_service(tmp_path, redis_url, None, "process", slots=1)
    lossy = Proxy(svc.port)
    try:
        ana, bob = svc.add_user("ana"), svc.add_user("bob")
        proj = make_project(tmp_path / "p", ["sh -c 'echo $((6 * 7)) apples'"])
        (proj / "noise.bin").write_bytes(os.urandom(256 * 1024))
        lossy.lose_answer_after = 256 * 1024  # the upload's connection: the job is made, the answer lost
        res = svc.client("submit", "-p", str(proj), env={"RAI_PROFILE": str(ana), "RAI_SERVER": f"http://127.0.0.1:{lossy.port}"})
        assert lossy.lose_answer_after is None, "no answer was lost"
        assert res.returncode == 0, res.stdout + res.stderr
        assert res.stdout.count("42 apples") == 1, res.stdout
        notes = _notes(res.stderr)
        assert len(notes) == 1 and "retrying" in notes[0], res.stderr
        assert len(_jobs_of(svc, ana)) == 1, _jobs_of(svc, ana)
        # the rule itself: one key, one job per student; another student's same key is their own
        archive = tar_gz([])
        upload = {"Content-Type": "application/gzip", "Idempotency-Key": "k-3f9a"}
        with svc.http(ana) as h:
            first, again = (h.post("/api/v1/jobs", content=archive, headers=upload) for _ in range(2))
            bad = h.post("/api/v1/jobs", content=archive, headers={**upload, "Idempotency-Key": "not a key!"})
        with svc.http(bob) as h:
            bobs = h.post("/api/v1/jobs", content=archive, headers=upload)
        assert first.status_code == again.status_code == bobs.status_code == 201, (first.text, again.text, bobs.text)
        assert first.json()["id"] == again.json()["id"] != bobs.json()["id"]
        assert bad.status_code == 422, bad.text
        assert len(_jobs_of(svc, ana)) == 2 and len(_jobs_of(svc, bob)) == 1
    finally:
        lossy.close()
        svc.shutdown()


def test_a_database_outage_answers_503_with_a_retry_hint_and_the_client_waits_it_out(tmp_path, redis_url):
    """PostgreSQL killed (a private one: the machine's is shared): every request that needs it
    answers 503 with Retry-After and says why; before, they were 500s ("internal error")."""
    pg = PrivatePostgres()
    svc = start_service(tmp_path, redis_url, pg.url, "process", worker=False)
    try:
        ana = svc.add_user("ana")
        env = {"RAI_PROFILE": str(ana)}
        proj = make_project(tmp_path / "p", ["echo hi"])
        res = svc.client("submit", "-p", str(proj), "--detach", env=env)
        assert res.returncode == 0, res.stdout + res.stderr
        job_id = next(line.split()[2] for line in res.stdout.splitlines() if " queued on " in line)
        pg.kill()
        with svc.http(ana) as h:
            answers = {
                "history": h.get("/api/v1/jobs"),
                "one job": h.get(f"/api/v1/jobs/{job_id}"),
                "upload": h.post("/api/v1/jobs", content=tar_gz([]), headers={"Content-Type": "application/gzip"}),
            }
        for what, r in answers.items():
            assert r.status_code == 503, (what, r.status_code, r.text)
            assert int(r.headers["Retry-After"]) > 0 and "database" in r.json()["detail"], (what, r.headers, r.text)
        res = svc.client("status", job_id, env=env)
        said = [line for line in res.stderr.splitlines() if line.strip()]
        assert res.returncode == 2 and len(said) == 1 and "database is unavailable" in said[0], res.stdout + res.stderr
        assert "internal error" not in res.stderr
        # a submit during the outage waits it out and ends with one job more
        client = svc.popen_client("submit", "-p", str(proj), "--detach", env=env)
        assert client.stderr is not None
        first = client.stderr.readline()
        assert RETRY_NOTE in first and "database" in first, first
        pg.start()
        out, err = client.communicate(timeout=90)
        assert client.returncode == 0, first + out + err
        assert len(_jobs_of(svc, ana)) == 2
        log = (svc.logs / "server.log").read_text()
        assert "unhandled error" not in log, log[-3000:]
    finally:
        svc.shutdown()
        pg.remove()


def test_the_client_shows_the_restart_it_lived_through(tmp_path, redis_url):
    """Issue 48: server and worker replaced at once (an upgrade without a drain, a host's reboot)
    while a job runs: the following client reconnects and says the job runs again and why, not
    only 'Running: …' a second time."""
    import threading
    import time

    svc = start_service(tmp_path, redis_url, None, "process", slots=1, extra_env={"RAI_WORKER_DEAD_AFTER": "600"})
    try:
        proj = make_project(tmp_path / "p", ["echo started; sleep 8; echo done-$((1 + 1))"])
        proc = svc.popen_client("submit", "-p", str(proj))
        out: list[str] = []
        reader = threading.Thread(target=lambda: out.extend(iter(proc.stdout.readline, "")), daemon=True)
        reader.start()
        wait_for(lambda: "started\n" in out, timeout=60, what="the job running")
        svc.stop("server", signal.SIGKILL)
        svc.stop("worker-w1", signal.SIGKILL)
        time.sleep(2)
        svc.start_server()
        svc.start_worker("w1")
        assert proc.wait(120) == 0
        reader.join(5)
        text = "".join(out)
        said = [ln for ln in out if "goes back in the queue" in ln]
        assert len(said) == 1 and "attempt 2 of" in said[0] and "restarted" in said[0], text
        assert text.count("\ndone-2\n") == 1 and "Job succeeded" in text, text
    finally:
        svc.shutdown()
