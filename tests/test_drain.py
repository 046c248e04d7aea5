"""Issue 48: an upgrade (SIGTERM to the worker, as `docker compose up -d` recreating it sends) loses
no job and reruns none: the worker takes nothing new, its runs go on up to RAI_DRAIN_SECONDS, and
what is left then goes back in the queue as a named restart that the student's client shows."""

from __future__ import annotations

import os
import signal

import pytest
from helpers import make_project, start_service, wait_for

pytestmark = pytest.mark.timeout(240)


def upgrade(svc, drain: str | None = None, exited_within: float = 60) -> None:
    """SIGTERM to the worker's main process (compose stops a container so), wait for it to end,
    start the new one under the same name."""
    part = svc.procs.pop("worker-w1")
    os.kill(part.proc.pid, signal.SIGTERM)
    part.proc.wait(timeout=exited_within)
    svc.start_worker("w1", **({"RAI_DRAIN_SECONDS": drain} if drain else {}))


def test_an_upgrade_lets_the_running_job_finish_once(tmp_path, redis_url):
    svc = start_service(tmp_path, redis_url, None, "process", slots=1)
    try:
        proj = make_project(tmp_path / "p", ["echo started; sleep 6; echo done-$((1 + 1))"])
        proc = svc.popen_client("submit", "-p", str(proj))
        wait_for(svc.any_running, timeout=60, what="the job running")
        upgrade(svc)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, out + err
        assert out.count("\ndone-2\n") == 1 and "goes back in the queue" not in out, out
        nxt = svc.client("submit", "-p", str(make_project(tmp_path / "n", ["echo after-the-upgrade"])))
        assert nxt.returncode == 0 and "after-the-upgrade" in nxt.stdout, nxt.stdout + nxt.stderr
        # the worker's log is its own lines: not one of httpx's per heartbeat and renewal (issue 48)
        assert "HTTP Request:" not in (svc.logs / "worker-w1.log").read_text()
    finally:
        svc.shutdown()


def test_what_outlasts_the_drain_goes_back_as_a_named_restart(tmp_path, redis_url):
    svc = start_service(tmp_path, redis_url, None, "process", slots=1, worker=False)
    try:
        svc.start_worker("w1", RAI_DRAIN_SECONDS="2")
        proj = make_project(tmp_path / "p", ["echo started; sleep 30; echo done-$((1 + 1))"])
        proc = svc.popen_client("submit", "-p", str(proj))
        wait_for(svc.any_running, timeout=60, what="the job running")
        upgrade(svc, exited_within=20)  # 2 s of draining, a heartbeat to notice, the report
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, out + err
        said = [ln for ln in out.splitlines() if "goes back in the queue" in ln]
        assert len(said) == 1 and "was asked to stop" in said[0] and "attempt 2 of" in said[0], out
        assert out.count("\ndone-2\n") == 1 and "Job succeeded" in out, out
    finally:
        svc.shutdown()


def test_the_compose_files_let_a_worker_drain():
    """docker compose stops a container with SIGKILL after its stop_grace_period (10 s unless set):
    the workers' must outlast their drain, or an upgrade kills and reruns their jobs."""
    from pathlib import Path

    import yaml

    from raiworker.config import WorkerSettings

    root = Path(__file__).resolve().parent.parent
    drain = WorkerSettings.model_fields["drain_seconds"].default
    for name in ("docker-compose.yml", "docker-compose.worker.yml"):
        grace = yaml.safe_load((root / name).read_text())["services"]["worker"]["stop_grace_period"]
        assert grace.endswith("s") and float(grace[:-1]) >= drain + 30, (name, grace)
