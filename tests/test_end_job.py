"""Issue 50: at a job's end, "every process of the job is gone" is decided by the pty helper
(``rai-pty --end-then``), which no process of the job can trace, not by a shell a surviving process
could attach to, pause or make report otherwise. Against the real engine and rai's busybox image."""

from __future__ import annotations

import time

import docker
import pytest
from docker.types import Mount

from raiworker.executors.docker.scripts import END_JOB_ENV, LEFT_OVER, ending_job
from raiworker.terminal import IN_CONTAINER, ends_job, pty_helper

pytestmark = pytest.mark.timeout(120)
IMAGE = "rai/busybox:latest"


@pytest.fixture
def box(tmp_path, docker_engine):
    helper = pty_helper(tmp_path / "work")
    assert helper is not None and ends_job(helper)
    client = docker.from_env()
    c = client.containers.run(
        IMAGE,
        ["sh", "-c", "exec sleep 600"],
        detach=True,
        init=True,
        user="0:0",
        network_mode="none",
        mounts=[Mount(IN_CONTAINER, str(helper), type="bind", read_only=True)],
        labels={"rai.test": "end-job"},
    )
    try:
        yield c
    finally:
        c.remove(force=True)


def _run(c, argv: list[str], user: str = "1000:1000", env: dict | None = None) -> tuple[int, str]:
    res = c.exec_run(argv, user=user, environment=env)
    return res.exit_code, res.output.decode(errors="replace")


def test_the_helper_ends_the_jobs_processes_before_its_script(box):
    box.exec_run(["sh", "-c", "sleep 300 & sleep 301 & exec sleep 302"], user="1000:1000", detach=True)
    time.sleep(0.5)
    code, out = _run(box, ending_job(True, "ps -o user,args | grep -c 'sleep 30[0-2]' || true", "exit 9"), env=END_JOB_ENV)
    assert code == 0 and out.strip() == "0", out  # none of the job's processes is left when the script runs


def test_a_survivor_is_reported_whatever_the_script_says(box):
    """A process the job's user cannot kill (here root's) survives every pass: the verdict is the
    helper's LEFT_OVER, even though the script it runs (which a survivor could trace) says 0."""
    box.exec_run(["sh", "-c", "exec sleep 303"], user="0:0", detach=True)
    box.exec_run(["sh", "-c", "exec sleep 304"], user="1000:1000", detach=True)
    time.sleep(0.5)
    started = time.monotonic()
    code, _ = _run(box, ending_job(True, "exit 0", "exit 0"), env=END_JOB_ENV)
    assert code == LEFT_OVER and time.monotonic() - started < 10
    code, out = _run(box, ["sh", "-c", "ps -o user,args | grep 'sleep 304' | grep -v grep || true"], user="0:0")
    assert "sleep 304" not in out  # the job's own process was killed all the same


def test_without_the_workers_word_the_helper_kills_nothing(box):
    """The worker probes the helper on its own host (``ends_job``): without RAI_PTY_END_JOB it must
    end nothing there."""
    box.exec_run(["sh", "-c", "exec sleep 305"], user="1000:1000", detach=True)
    time.sleep(0.5)
    code, _ = _run(box, [IN_CONTAINER, "--end-then", "exit 7"])
    assert code == 7
    _, out = _run(box, ["sh", "-c", "ps -o args | grep 'sleep 305' | grep -v grep || true"], user="0:0")
    assert "sleep 305" in out
