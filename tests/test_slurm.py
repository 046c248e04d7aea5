"""The Slurm executor against a real one-node Slurm cluster: success with live lines, failure,
timeout, cancel, memory kill, and a job waiting in Slurm's queue with its reason shown."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
from helpers import make_project, start_service, wait_for

import slurm_cluster

pytestmark = pytest.mark.timeout(300)
IMAGE = "rai/busybox:latest"  # named, not used: no container runtime on the test cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tool = slurm_cluster.missing()
    if tool:
        if os.environ.get("RAI_REQUIRE_SLURM") == "1":
            pytest.fail(f"Slurm required but {tool} is not installed")
        pytest.skip(f"no Slurm here ({tool} missing)")
    c = slurm_cluster.start(tmp_path_factory.mktemp("slurm"))
    yield c
    c.stop()


@pytest.fixture(scope="module")
def svc(tmp_path_factory, redis_url, cluster):
    s = start_service(
        tmp_path_factory.mktemp("svc-slurm"),
        redis_url,
        None,
        "slurm",
        slots=2,
        extra_env={
            **cluster.env,
            "RAI_SLURM_POLL_SECONDS": "0.3",
            "RAI_SLURM_GRACE_SECONDS": "30",
            "RAI_CPUS": "1",
            "RAI_MEMORY_MB": "1024",
        },
    )
    yield s
    s.shutdown()


def job_id_of(out: str) -> str:
    return next(ln.split()[2] for ln in out.splitlines() if ln.startswith("✱ Job ") and " queued on " in ln)


def job(svc, jid: str) -> dict:
    with svc.http() as h:
        return h.get(f"/api/v1/jobs/{jid}").json()


def test_success_streams_lines_live_in_order(svc, tmp_path):
    proj = make_project(
        tmp_path / "p",
        [
            "x=first; echo mark-$x; echo to-stderr >&2; sleep 3; x=last; echo mark-$x",
            "echo /src has $(ls /src | wc -l) entries; pwd; echo built > /build/out.txt",
        ],
    )
    proc = svc.popen_client("submit", "-p", str(proj))
    seen: dict[str, float] = {}
    for line in proc.stdout:
        for key in ("mark-first", "mark-last", "Job succeeded"):
            if key in line and key not in seen:
                seen[key] = time.monotonic()
    proc.wait(60)
    err = proc.stderr.read()
    assert proc.returncode == 0, err
    assert seen["mark-last"] - seen["mark-first"] > 2.0, seen  # "first" reached the client while the command ran
    assert "to-stderr" in err
    jid = next(j["id"] for j in svc.http().get("/api/v1/jobs").json()["jobs"])
    info = job(svc, jid)
    assert info["state"] == "succeeded" and info["has_build"]
    names = [p["name"] for p in info["phases"]]
    assert "slurm submitted" in names and "slurm started" in names


def test_first_failure_stops_and_keeps_the_exit_code(svc, tmp_path):
    proj = make_project(tmp_path / "p", ["echo one", "exit 3", "echo never"])
    res = svc.client("submit", "-p", str(proj))
    assert res.returncode == 3, res.stdout + res.stderr
    assert "never" not in res.stdout.replace("echo never", "")
    info = job(svc, job_id_of(res.stdout))
    assert info["state"] == "failed" and info["exit_code"] == 3 and info["failed_command"] == "exit 3"


def test_wall_time_limit_times_out(svc, tmp_path):
    proj = make_project(tmp_path / "p", ["echo start; sleep 60"], extra="resources:\n  limits:\n    wall_seconds: 3\n")
    res = svc.client("submit", "-p", str(proj))
    info = job(svc, job_id_of(res.stdout))
    assert info["state"] == "timed_out", info
    assert "wall-time limit of 3 s" in info["message"]


def test_cancel_runs_scancel(svc, cluster, tmp_path):
    proj = make_project(tmp_path / "p", ["echo started; sleep 120"])
    res = svc.client("submit", "-p", str(proj), "--detach")
    jid = job_id_of(res.stdout)
    wait_for(lambda: any("started" in ln for ln in svc.client("logs", jid).stdout.splitlines()), timeout=60, what="job running")
    assert svc.client("cancel", jid).returncode == 0
    wait_for(lambda: job(svc, jid)["state"] == "cancelled", timeout=60, what="cancelled")
    wait_for(lambda: f"rai-{jid}" not in cluster.run("squeue", "-h", "-o", "%j"), timeout=30, what="Slurm job gone")


def test_memory_kill_is_explained(svc, tmp_path):
    hog = "python3 -c 'import time; x = bytearray(400 * 1024 * 1024); time.sleep(10)'"
    proj = make_project(tmp_path / "p", ["echo before", hog, "echo never"], extra="resources:\n  limits:\n    memory_mb: 100\n")
    res = svc.client("submit", "-p", str(proj))
    info = job(svc, job_id_of(res.stdout))
    assert info["state"] == "failed", info
    assert "out of memory" in (info["message"] or ""), info


def test_a_job_waiting_in_slurm_shows_the_reason(svc, cluster, tmp_path):
    # not "sleep 300": test_paths looks for that command host-wide, and Slurm may reap this one late
    blocker = cluster.run("sbatch", "--parsable", "--exclusive", "--output=/dev/null", "--wrap", "sleep 290").strip()
    try:
        proj = make_project(tmp_path / "p", ["echo ran after the blocker"])
        res = svc.client("submit", "-p", str(proj), "--detach")
        jid = job_id_of(res.stdout)
        wait_for(lambda: "Queued in Slurm:" in svc.client("logs", jid).stdout, timeout=60, what="pending reason shown")
        log = svc.client("logs", jid).stdout
        assert "position 1 of 1 pending" in log or "Resources" in log or "Priority" in log, log
        # Slurm's PENDING is the student's "queued", with Slurm's reason, in the API, status and queue
        wait_for(lambda: job(svc, jid)["state"] == "queued", timeout=30, what="pending job shown as queued")
        info = job(svc, jid)
        assert info["waiting"].startswith("Queued in Slurm: ") and info["worker"], info
        status = svc.client("status", jid).stdout
        assert "queued" in status and "Queued in Slurm" in status, status
        queue = svc.client("queue").stdout
        assert f"Your job {jid}" in queue and "Queued in Slurm" in queue, queue
    finally:
        subprocess.run(["scancel", blocker], env={**os.environ, **cluster.env}, check=False)
    wait_for(lambda: job(svc, jid)["state"] == "succeeded", timeout=90, what="job ran once the node was free")
    assert job(svc, jid)["waiting"] is None
    assert any(p["name"] == "slurm pending" for p in job(svc, jid)["phases"])


def test_node_failure_requeues_the_job(svc, cluster, tmp_path):
    """NODE_FAIL is not the student's fault: the job goes back in rai's queue and runs again."""
    node = cluster.run("sinfo", "-h", "-o", "%N").strip()
    proj = make_project(tmp_path / "p", ["echo started; sleep 6; echo done"])
    res = svc.client("submit", "-p", str(proj), "--detach")
    jid = job_id_of(res.stdout)
    wait_for(lambda: "started" in svc.client("logs", jid).stdout.replace("echo started", ""), timeout=60, what="job running")
    try:
        cluster.run("scontrol", "update", f"nodename={node}", "state=down", "reason=rai-test")
        wait_for(
            lambda: "goes back in the queue (attempt 2" in svc.client("logs", jid).stdout,
            timeout=60,
            what="job requeued after the node failed",
        )
    finally:  # "resume" is refused when slurmd already brought the node back (ReturnToService=2)
        subprocess.run(
            ["scontrol", "update", f"nodename={node}", "state=resume"], env={**os.environ, **cluster.env}, capture_output=True, check=False
        )
    wait_for(
        lambda: (
            "idle" in cluster.run("sinfo", "-h", "-o", "%T")
            or "mix" in cluster.run("sinfo", "-h", "-o", "%T")
            or "alloc" in cluster.run("sinfo", "-h", "-o", "%T")
        ),
        timeout=60,
        what="node back in service",
    )
    wait_for(lambda: job(svc, jid)["state"] == "succeeded", timeout=120, what="job ran again once the node was back")
    log = svc.client("logs", jid).stdout
    assert "NODE_FAIL" in log, log
    assert log.count("done") - log.count("echo done") == 1, log  # the second run finished; the first did not


def test_a_paused_worker_s_slurm_job_ends_with_its_lease(svc, cluster, tmp_path):
    """Issue 51: the worker paused whole (SIGSTOP of its process group) past its lease and margin:
    the agent's watcher in the allocation ends the Slurm job before the server may hand the job to
    another worker, and the job runs again as attempt 2."""
    lease = float(svc.env.get("RAI_WORKER_DEAD_AFTER", "15"))
    margin = float(svc.env.get("RAI_LEASE_MARGIN", "5"))
    proj = make_project(tmp_path / "p", ["echo started; sleep 20; echo done"])
    jid = job_id_of(svc.client("submit", "-p", str(proj), "--detach").stdout)
    wait_for(lambda: "started" in svc.client("logs", jid).stdout.replace("echo started", ""), timeout=60, what="job running")
    group = svc.procs["worker-w1"].pid  # its own session: the group's id is its pid
    os.killpg(group, signal.SIGSTOP)
    stopped, last_seen = time.monotonic(), 0.0
    try:
        while time.monotonic() - stopped < lease + margin + 4:
            if f"rai-{jid}" in cluster.run("squeue", "-h", "-t", "RUNNING", "-o", "%j"):
                last_seen = time.monotonic() - stopped
            time.sleep(0.3)
    finally:
        os.killpg(group, signal.SIGCONT)
    # the last renewal came at most a heartbeat before the stop; the watcher acts within 2 s of the stamp
    assert last_seen < lease + margin, f"the Slurm job ran {last_seen:.1f} s into the pause (lease {lease:g} s, margin {margin:g} s)"
    try:
        wait_for(lambda: job(svc, jid)["state"] == "succeeded", timeout=120, what="the job ran again")
    finally:
        log = svc.client("logs", jid).stdout
        print(job(svc, jid), log)  # shown when it failed
    assert sum("goes back in the queue (attempt 2" in ln for ln in log.splitlines()) == 1, log[-2000:]
