"""Issue 51: a job's command cannot outlive its lease, for the process and Slurm executors (the
Docker executor's container is proven by the fault campaign, tests/faults). The worker is paused
whole (SIGSTOP of its process group: main process, pool, every thread) while a command runs: the
command must be gone before the server may give the job to another worker (the lease and its
margin after the last renewal), and the job must run again as a named attempt and succeed."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
from helpers import make_project, start_service, wait_for

pytestmark = pytest.mark.timeout(240)
LEASE, MARGIN = 8.0, 6.0  # RAI_WORKER_DEAD_AFTER, RAI_LEASE_MARGIN here: a short window, the same rule
WITHIN = LEASE + 3  # past the lease, within its margin: the worker is back before the server gives the job away
PAST = LEASE + MARGIN + 4  # past the window: the server may run the job again meanwhile


def job_id_of(out: str) -> str:
    return next(ln.split()[2] for ln in out.splitlines() if ln.startswith("✱ Job ") and " queued on " in ln)


def running(mark: str) -> bool:
    """Whether a process whose command line holds ``mark`` runs on this host (not one of pgrep's)."""
    res = subprocess.run(["pgrep", "-f", mark], capture_output=True, text=True, check=False)
    return bool(res.stdout.split())


def pause_whole_worker(svc, name: str, mark: str, pause: float) -> float:
    """SIGSTOP the worker's process group for ``pause`` s; returns how long after the stop the job's
    command still ran (sampled every 0.1 s)."""
    group = svc.procs[f"worker-{name}"].pid  # its own session: the group's id is its pid
    os.killpg(group, signal.SIGSTOP)
    stopped, last_seen = time.monotonic(), 0.0
    try:
        while time.monotonic() - stopped < pause:
            if running(mark):
                last_seen = time.monotonic() - stopped
            time.sleep(0.1)
    finally:
        os.killpg(group, signal.SIGCONT)
    return last_seen


def check_rerun(svc, jid: str, last_seen: float, words: str) -> None:
    """The command was gone in time, and the job ran again as attempt 2, its reason (``words``) said once."""
    # the last renewal came at most a heartbeat before the stop; the watcher acts within 2 s of the
    # stamp's time: the command is gone by LEASE + 3 s, before the server may hand the job on
    assert last_seen < LEASE + 3 + 1, f"the command ran {last_seen:.1f} s into the pause (lease {LEASE:g} s, margin {MARGIN:g} s)"
    wait_for(lambda: svc_job(svc, jid)["state"] == "succeeded", timeout=120, what="the job ran again and succeeded")
    log = svc.client("logs", jid).stdout
    said = [ln for ln in log.splitlines() if "goes back in the queue" in ln]
    assert len(said) == 1 and "attempt 2 of" in said[0] and words in said[0], log[-2000:]
    assert "out of memory" not in log and "killed by signal" not in log, log[-2000:]


def svc_job(svc, jid: str) -> dict:
    with svc.http() as h:
        return h.get(f"/api/v1/jobs/{jid}").json()


ENV = {"RAI_WORKER_DEAD_AFTER": f"{LEASE:g}", "RAI_LEASE_MARGIN": f"{MARGIN:g}", "RAI_HEARTBEAT_SECONDS": "2"}


def test_process_executor_command_stops_with_its_lease(tmp_path, redis_url):
    svc = start_service(tmp_path, redis_url, None, "process", slots=1, extra_env=ENV)
    try:
        mark = f"lease-mark-{os.getpid()}"
        proj = make_project(tmp_path / "p", [f"echo started; sh -c 'sleep 30; true {mark}'; echo done"])
        res = svc.client("submit", "-p", str(proj), "--detach")
        jid = job_id_of(res.stdout)
        wait_for(lambda: running(mark), timeout=60, what="the command running")
        # back within the lease's margin: the run itself says why its command was stopped
        check_rerun(svc, jid, pause_whole_worker(svc, "w1", mark, WITHIN), "renewed no lease on the job")
    finally:
        svc.shutdown()


def test_a_server_that_cannot_store_the_end_does_not_take_the_worker_for_dead(tmp_path, redis_url):
    """Issue 51: the server's storage failing while it archives a job's log (507) raised the job's
    fence and left it up: the run's Redis renewal was refused, its HTTP one never sent, and the
    reaper requeued a healthy worker's finished job ("stopped answering")."""
    import shutil

    svc = start_service(tmp_path, redis_url, None, "process", slots=1, extra_env=ENV)
    logs = svc.data / "storage" / "logs"
    try:
        proj = make_project(tmp_path / "p", ["echo started; sleep 2; echo done-$((1 + 1))"])
        proc = svc.popen_client("submit", "-p", str(proj))
        wait_for(svc.any_running, timeout=60, what="the job running")
        shutil.move(logs, logs.with_name("logs.away"))  # a file where the folder was: every write in it fails
        logs.write_text("not a folder")
        time.sleep(PAST)  # the job ends meanwhile; its end cannot be stored for longer than the lease's window
        logs.unlink()
        shutil.move(logs.with_name("logs.away"), logs)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, out + err
        assert "stopped answering" not in out and "goes back in the queue" not in out, out
        assert out.count("\ndone-2\n") == 1 and "Job succeeded" in out, out
    finally:
        svc.shutdown()
