"""Faults: a worker dies mid-job, the server restarts mid-job. Nothing is lost, nothing sticks."""

from __future__ import annotations

import signal
import time

import pytest

from conftest import make_project, start_service, wait_for

pytestmark = pytest.mark.timeout(300)


def test_job_of_a_dead_worker_is_requeued_and_finishes_elsewhere(tmp_path, redis_url, docker_engine):
    svc = start_service(tmp_path, redis_url, None, "docker", slots=1)
    try:
        proj = make_project(tmp_path / "p", ["sh -c 'echo attempt on $(hostname); sleep 4; echo done'"])
        res = svc.client("submit", "-p", str(proj), "--detach")
        jid = next(l.split()[2] for l in res.stdout.splitlines() if " queued on " in l)
        wait_for(lambda: docker_engine.containers.list(filters={"label": "rai.worker=w1"}), what="w1's job container")
        svc.stop("worker-w1", signal.SIGKILL)  # the box dies
        svc.start_worker("w2")
        res = svc.client("logs", jid, "--follow", timeout=120)
        assert res.returncode == 0, res.stdout + res.stderr
        assert "Worker w1 stopped answering; the job goes back in the queue (attempt 2 of 3)" in res.stdout
        assert "Worker w2 started the container" in res.stdout and res.stdout.count("done") >= 1
        with svc.http() as h:
            job = h.get(f"/api/v1/jobs/{jid}").json()
        assert job["state"] == "succeeded" and job["worker"] == "w2"
        # the dead worker's container is removed when that worker starts again
        leftover = docker_engine.containers.list(all=True, filters={"label": "rai.worker=w1"})
        assert leftover, "expected the killed worker's container to still exist"
        svc.start_worker("w1")
        assert docker_engine.containers.list(all=True, filters={"label": "rai.worker=w1"}) == []
    finally:
        svc.shutdown()


def test_server_restart_mid_job_loses_no_line(tmp_path, redis_url, docker_engine):
    svc = start_service(tmp_path, redis_url, None, "docker", slots=1)
    try:
        proj = make_project(tmp_path / "p", ["sh -c 'for k in $(seq 1 30); do echo tick $k; sleep 0.2; done'"])
        proc = svc.popen_client("submit", "-p", str(proj))
        time.sleep(3)
        svc.stop("server")
        time.sleep(2)
        svc.start_server()
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, out + err
        ticks = [l for l in out.splitlines() if l.startswith("tick")]
        assert ticks == [f"tick {k}" for k in range(1, 31)]
        assert "reconnecting" in err
    finally:
        svc.shutdown()
