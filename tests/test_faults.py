"""Faults: a worker dies mid-job, the server restarts mid-job. Nothing is lost, nothing sticks."""

from __future__ import annotations

import os
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


def test_a_server_gone_for_good_ends_the_submit_with_one_line(tmp_path, redis_url):
    svc = start_service(tmp_path, redis_url, None, "process", slots=1)
    try:
        proj = make_project(tmp_path / "p", ["sh -c 'echo started; sleep 60'"])
        proc = svc.popen_client("submit", "-p", str(proj), env={"RAI_RECONNECT_SECONDS": "2"})
        assert proc.stdout is not None
        while "started" not in (line := proc.stdout.readline()):
            assert line, "the client ended before the job's first line"
        svc.stop("server")
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 2, out + err
        assert "lost the connection" in err and "raiclient logs" in err and "Traceback" not in err, err
    finally:
        svc.shutdown()


def test_raid_dev_restarts_a_crashed_part_and_names_its_worker_after_its_folder(tmp_path):
    """`raid dev` supervises: a worker killed with SIGKILL is started again, with a message; each
    instance's worker has its own name, so two on one host never reap each other's containers."""
    import re
    import signal
    import subprocess
    import sys

    from conftest import free_port, wait_for

    port = free_port()
    env = {**os.environ, "HOME": str(tmp_path)}
    raid = subprocess.Popen([sys.executable, "-m", "raiserver.dev", "dev", "--data-dir", str(tmp_path / "d"), "--port", str(port),
                             "--executor", "process", "--gpus", "none"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    out: list[str] = []
    import threading

    threading.Thread(target=lambda: out.extend(iter(raid.stdout.readline, "")), daemon=True).start()
    try:
        wait_for(lambda: any("web view:" in line for line in out), timeout=90, what="raid dev up")

        def workers() -> list[int]:
            found = []
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    if b"raiworker.cli" in open(f"/proc/{pid}/cmdline", "rb").read() and \
                            str(tmp_path).encode() in open(f"/proc/{pid}/environ", "rb").read():
                        found.append(int(pid))
                except OSError:
                    pass
            return found

        first = wait_for(workers, what="the worker process")
        name = re.search(rb"RAI_WORKER_NAME=([^\0]+)", open(f"/proc/{first[0]}/environ", "rb").read()).group(1).decode()
        assert re.fullmatch(r"dev-.+-[0-9a-f]{6}", name), name
        os.killpg(first[0], signal.SIGKILL)
        wait_for(lambda: any("worker stopped" in line and "starting it again" in line for line in out), timeout=30,
                 what="the stop to be reported")
        wait_for(lambda: any("worker started again" in line for line in out), timeout=30, what="the restart")
        assert wait_for(lambda: [p for p in workers() if p not in first], timeout=30, what="a new worker process")
    finally:
        os.killpg(raid.pid, signal.SIGTERM)
        raid.wait(30)
