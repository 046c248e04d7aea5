"""The whole path, for real: raiclient → server → Celery/Redis → Docker container → live log."""

from __future__ import annotations

import concurrent.futures as cf
import json
import os
import signal
import sys
import tarfile
import time

import httpx
import pytest
from helpers import ROOT, events, make_project, read_log, wait_for

pytestmark = pytest.mark.timeout(300)


def job_id_from(output: str) -> str:
    for line in output.splitlines():
        if line.startswith("✱ Job ") and " queued on " in line:
            return line.split()[2]
    raise AssertionError(f"no job id in:\n{output}")


def test_hello_streams_every_line_in_order_with_stderr(docker_service):
    res = docker_service.client("submit", "-p", str(ROOT / "examples" / "hello"))
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout
    order = [
        "✱ Submitting as admin @",
        "✱ Packing project (3 files",
        "queued on 'gpu'",
        "✱ Worker w1 started the container (image rai/busybox:latest)",
        '✱ Running: /bin/sh -c "cp -r /src/* /build"',
        "hello from Linux, working in /build",
        "✱ Running: sh ./hello.sh 3",
        "step 1 of 3",
        "step 2 of 3",
        "step 3 of 3",
        "Op Time: 0.000125",
        "✱ Build folder:",
        "✱ Job succeeded in",
    ]
    positions = [out.index(s) for s in order]
    assert positions == sorted(positions), out
    assert res.stderr.splitlines() == ["note 1 on stderr", "note 2 on stderr", "note 3 on stderr"]
    # the stored log keeps stdout and stderr interleaved in the order they were read, each marked
    jid = job_id_from(out)
    with docker_service.http() as h:
        events = read_log(h, jid)
    texts = [(e["s"], e["text"]) for e in events]
    assert ("err", "note 1 on stderr") in texts and ("out", "step 3 of 3") in texts
    assert [e["n"] for e in events] == list(range(1, len(events) + 1))


def test_failing_command_stops_the_job_and_its_code_is_the_clients(docker_service, tmp_path):
    proj = make_project(tmp_path / "p", ["echo before", "sh -c 'echo oops >&2; exit 7'", "echo never-runs"])
    res = docker_service.client("submit", "-p", str(proj))
    assert res.returncode == 7, res.stdout + res.stderr
    assert "before" in res.stdout and "never-runs" not in res.stdout.replace("✱ Running: echo never-runs", "")
    assert "✱ Running: echo never-runs" not in res.stdout
    assert "Job failed in" in res.stdout and "exited with 7" in res.stdout
    assert "oops" in res.stderr


def test_build_folder_holds_what_the_job_wrote(docker_service, tmp_path):
    proj = make_project(
        tmp_path / "p",
        ["mkdir -p out", "sh -c 'echo 42 > out/answer.txt'", "cp /src/input.txt ."],
        files={"input.txt": "from the project\n"},
    )
    res = docker_service.client("submit", "-p", str(proj))
    assert res.returncode == 0, res.stdout + res.stderr
    jid = job_id_from(res.stdout)
    dl = docker_service.client("download", jid, "-o", str(tmp_path / "b.tgz"))
    assert dl.returncode == 0, dl.stderr
    with tarfile.open(tmp_path / "b.tgz") as tar:
        assert tar.extractfile("out/answer.txt").read() == b"42\n"
        assert tar.extractfile("input.txt").read() == b"from the project\n"


def test_src_is_read_only_and_there_is_no_network_and_no_root(docker_service, tmp_path):
    proj = make_project(
        tmp_path / "p",
        [
            "sh -c 'touch /src/x 2>&1 || echo SRC_READ_ONLY'",
            "sh -c 'ls /sys/class/net; wget -T 2 -q -O- http://127.0.0.1:1/ 2>&1 || echo NO_NETWORK'",
            "id -u",
        ],
    )
    res = docker_service.client("submit", "-p", str(proj))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SRC_READ_ONLY" in res.stdout and "Read-only file system" in res.stdout
    assert "NO_NETWORK" in res.stdout
    lines = res.stdout.splitlines()
    nets = lines[lines.index("✱ Running: sh -c 'ls /sys/class/net; wget -T 2 -q -O- http://127.0.0.1:1/ 2>&1 || echo NO_NETWORK'") + 1]
    assert nets == "lo"  # loopback only: no interface reaches out
    assert "1000" in lines


def test_wall_time_limit_ends_timed_out(docker_service, tmp_path):
    proj = make_project(tmp_path / "p", ["echo start", "sleep 60", "echo never"], extra="resources:\n  limits:\n    wall_seconds: 2\n")
    t0 = time.monotonic()
    res = docker_service.client("submit", "-p", str(proj))
    assert res.returncode == 124, res.stdout + res.stderr
    assert time.monotonic() - t0 < 20
    assert "timed out: 'sleep 60' was running when the job hit its wall-time limit of 2 s" in res.stdout
    assert "Job timed out" in res.stdout


def test_cancel_stops_a_running_job_within_two_seconds(docker_service, tmp_path):
    proj = make_project(tmp_path / "p", ["echo started", "sleep 120"])
    proc = docker_service.popen_client("submit", "-p", str(proj))
    buf = []
    jid = None
    while jid is None:
        line = proc.stdout.readline()
        buf.append(line)
        if " queued on " in line:
            jid = line.split()[2]
    wait_for(lambda: "started" in (buf.append(proc.stdout.readline()) or "".join(buf)), timeout=30, what="job start")
    t0 = time.monotonic()
    res = docker_service.client("cancel", jid)
    assert res.returncode == 0, res.stderr
    out, _ = proc.communicate(timeout=30)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 143, "".join(buf) + out
    assert "Job cancelled" in out
    assert elapsed < 4.0  # stopped within 2 s; the rest is the client noticing
    with docker_service.http() as h:
        job = h.get(f"/api/v1/jobs/{jid}").json()
    assert job["state"] == "cancelled"
    assert (time.monotonic() - t0) < 5


def test_ctrl_c_detaches_and_the_job_goes_on(docker_service, tmp_path):
    proj = make_project(tmp_path / "p", ["sleep 2", "echo finished-anyway"])
    proc = docker_service.popen_client("submit", "-p", str(proj))
    line = ""
    while " queued on " not in line:
        line = proc.stdout.readline()
    jid = line.split()[2]
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 130
    assert f"raiclient logs {jid} --follow" in out and f"raiclient cancel {jid}" in out
    res = docker_service.client("logs", jid, "--follow")
    assert res.returncode == 0 and "finished-anyway" in res.stdout


def test_ten_concurrent_submissions_all_finish_with_their_own_logs(docker_service, tmp_path):
    projects = [make_project(tmp_path / f"p{i}", [f"sh -c 'for k in 1 2 3 4 5; do echo job{i} line $k; done'"]) for i in range(10)]
    with cf.ThreadPoolExecutor(10) as pool:
        results = list(pool.map(lambda p: docker_service.client("submit", "-p", str(p), timeout=240), projects))
    for i, res in enumerate(results):
        assert res.returncode == 0, res.stdout + res.stderr
        mine = [ln for ln in res.stdout.splitlines() if ln.startswith("job")]
        assert mine == [f"job{i} line {k}" for k in range(1, 6)]


def test_reconnecting_reader_gets_every_line_exactly_once(docker_service, tmp_path):
    proj = make_project(tmp_path / "p", ["sh -c 'for k in $(seq 1 40); do echo line $k; sleep 0.05; done'"])
    res = docker_service.client("submit", "-p", str(proj), "--detach")
    jid = job_id_from(res.stdout)
    seen: list[dict] = []
    last = 0
    with docker_service.http() as h:
        # read a few lines at a time, dropping the connection each time, resuming with Last-Event-ID
        for _ in range(200):
            headers = {"Last-Event-ID": str(last)} if last else {}
            got, ended = 0, False
            with h.stream("GET", f"/api/v1/jobs/{jid}/log", headers=headers, timeout=60) as resp:
                for event, data, event_id in events(resp.iter_lines()):
                    if event == "lines":
                        for b in json.loads(data):
                            seen.extend({"n": b["n"] + i, "s": b["s"], "text": t} for i, t in enumerate(b["x"].split("\n")))
                        assert event_id is not None and int(event_id) == seen[-1]["n"], "the event id is its last line's number"
                        last = int(event_id)
                        got += 1
                        if got == 2:
                            break
                    elif event == "end":
                        ended = True
                        break
            if ended:
                break
    ns = [ln["n"] for ln in seen]
    assert ns == list(range(1, len(ns) + 1)), "a line was lost or repeated"
    outs = [ln["text"] for ln in seen if ln["s"] == "out"]
    assert outs == [f"line {k}" for k in range(1, 41)]


def test_history_status_and_download_errors(docker_service, tmp_path):
    res = docker_service.client("history")
    assert res.returncode == 0 and "succeeded" in res.stdout
    res = docker_service.client("status", "01NOTAJOB0000000000000000")
    assert res.returncode == 2 and "no job 01NOTAJOB0000000000000000" in res.stderr
    assert "Traceback" not in res.stderr


def test_other_students_jobs_are_invisible(docker_service, tmp_path):
    bob = docker_service.add_user("bob")
    carol = docker_service.add_user("carol")
    proj = make_project(tmp_path / "p", ["echo bob-secret"])
    res = docker_service.client("submit", "-p", str(proj), env={"RAI_PROFILE": str(bob)})
    jid = job_id_from(res.stdout)
    with docker_service.http(carol) as h:
        for method, url in [
            ("GET", f"/api/v1/jobs/{jid}"),
            ("GET", f"/api/v1/jobs/{jid}/log"),
            ("GET", f"/api/v1/jobs/{jid}/build.tar.gz"),
            ("POST", f"/api/v1/jobs/{jid}/cancel"),
        ]:
            assert h.request(method, url).status_code == 404, url
        assert all(j["id"] != jid for j in h.get("/api/v1/jobs").json()["jobs"])
    with docker_service.http(bob) as h:
        assert h.get(f"/api/v1/jobs/{jid}").json()["state"] == "succeeded"


def test_every_job_has_a_timeline_of_its_steps(docker_service, tmp_path):
    """Per-phase times, in the API and `raiclient status`: where the time went when the queue is slow."""
    proj = make_project(tmp_path / "p", ["echo first", "sh -c 'sleep 0.3; echo second'"])
    res = docker_service.client("submit", "-p", str(proj))
    assert res.returncode == 0, res.stdout + res.stderr
    jid = job_id_from(res.stdout)
    with docker_service.http() as h:
        phases = h.get(f"/api/v1/jobs/{jid}").json()["phases"]
    names = [p["name"] for p in phases]
    for step in (
        "submitted",
        "released",
        "claimed",
        "container started",
        "command started",
        "first line",
        "command ended",
        "build uploaded",
        "finished",
    ):
        assert step in names, (step, names)
    assert names[0] == "submitted" and names[-1] == "finished"
    assert names.count("command started") == 2 and names.count("command ended") == 2
    times = [p["at"] for p in phases]
    assert times == sorted(times)
    started = [p["detail"] for p in phases if p["name"] == "command started"]
    assert started[-1] == "sh -c 'sleep 0.3; echo second'"
    assert [p["detail"] for p in phases if p["name"] == "command ended"] == ["exit 0"] * 2
    status = docker_service.client("status", jid)
    assert "Timeline" in status.stdout and "container started" in status.stdout and "build uploaded" in status.stdout


def test_prometheus_metrics_from_loopback(docker_service, tmp_path):
    """/metrics: jobs by state, queue depth, wait and run times, workers and GPUs, watchers, HTTP
    answers and refused uploads by cause — the same whichever server process answers."""
    proj = make_project(tmp_path / "p", ["echo measured"])
    assert docker_service.client("submit", "-p", str(proj)).returncode == 0
    with docker_service.http() as h:
        assert h.post("/api/v1/jobs", content=b"not a tar", headers={"Content-Type": "application/gzip"}).status_code == 400
        time.sleep(2.5)  # the counters reach Redis every 2 s
        r = httpx.get(f"{docker_service.url}/metrics", timeout=30)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.text
    import re

    def value(pattern: str) -> float:
        m = re.search(rf"^{pattern} ([0-9.e+]+)$", text, re.M)
        assert m, (pattern, text[:3000])
        return float(m.group(1))

    assert value(r'rai_jobs\{state="succeeded"\}') >= 1
    assert value(r"rai_job_run_seconds_count") >= 1 and value(r'rai_job_wait_seconds_bucket\{le="\+Inf"\}') >= 1
    assert value("rai_workers_live") == 1
    assert value(r'rai_http_responses_total\{class="2xx"\}') > 0
    assert value(r'rai_uploads_refused_total\{cause="bad_archive"\}') >= 1
    assert value("rai_sse_watchers") >= 0
    assert value(r'rai_log_lines_total\{what="sent"\}') >= 1


def test_a_closed_pipe_ends_submit_quietly_with_the_jobs_status(docker_service, tmp_path):
    """Issue 26: `raiclient submit -p … | head -2` ended with a BrokenPipeError traceback and exit 1."""
    import subprocess

    for commands, status in ((["sh -c 'for k in $(seq 1 500); do echo line $k; done'"], 0), (["sh -c 'seq 1 500; exit 3'"], 3)):
        proj = make_project(tmp_path / f"p{status}", commands)
        env = {**os.environ, "RAI_PROFILE": str(docker_service.profile), "RAI_SERVER": docker_service.url}
        res = subprocess.run(
            ["bash", "-c", f"{sys.executable} -m raiclient submit -p {proj} | head -2; echo status=${{PIPESTATUS[0]}}"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert "Traceback" not in res.stderr and "BrokenPipe" not in res.stderr, res.stderr
        assert res.stdout.strip().endswith(f"status={status}"), res.stdout + res.stderr


def test_cancelling_a_finished_job_says_nothing_was_cancelled(docker_service, tmp_path):
    """Issue 26: `raiclient cancel` on a finished job printed its state and exited 0."""
    res = docker_service.client("submit", "-p", str(make_project(tmp_path / "p", ["echo done"])))
    jid = job_id_from(res.stdout)
    res = docker_service.client("cancel", jid)
    assert res.returncode != 0, res.stdout + res.stderr
    assert f"job {jid} already succeeded at" in res.stderr and "nothing was cancelled" in res.stderr, res.stderr


def test_a_server_address_without_scheme_works(docker_service):
    """Issue 26: RAI_SERVER=127.0.0.1:8000 gave 'cannot reach the rai server' although it ran."""
    res = docker_service.client("history", env={"RAI_SERVER": docker_service.url.removeprefix("http://")})
    assert res.returncode == 0, res.stdout + res.stderr


def test_history_shows_whole_ids_and_any_unique_start_of_one_works(docker_service, tmp_path):
    """Issue 26: in an 80-column terminal `raiclient history` cut ids, and the cut ids were refused."""
    dana = docker_service.add_user("dana")
    env = {"RAI_PROFILE": str(dana), "COLUMNS": "80"}
    ids = []
    for i in range(2):
        res = docker_service.client("submit", "-p", str(make_project(tmp_path / f"p{i}", [f"echo run-{i}"])), env=env)
        ids.append(job_id_from(res.stdout))
    out = docker_service.client("history", env=env).stdout
    assert all(jid in out for jid in ids), out
    assert max(map(len, out.splitlines())) <= 80, out
    res = docker_service.client("status", ids[1][:12].lower(), env=env)
    assert res.returncode == 0 and ids[1] in res.stdout, res.stdout + res.stderr
    assert "run-1" in docker_service.client("logs", ids[1][:12], env=env).stdout
    common = next(n for n in range(26) if ids[0][n] != ids[1][n])  # ULIDs of one second share their start
    if common >= 6:
        res = docker_service.client("status", ids[0][:common], env=env)
        assert res.returncode != 0 and "is the start of several jobs" in res.stderr and "give more characters" in res.stderr
    res = docker_service.client("status", ids[0][:4], env=env)
    assert res.returncode != 0 and "give at least 6 characters" in res.stderr


def test_login_without_a_terminal_names_the_flags_and_a_wrong_key_is_said_plainly(docker_service, tmp_path):
    """Issue 26: without a terminal `raiclient login` printed 'Server: Aborted.'; a failed login told
    you to run `raiclient login`."""
    import subprocess

    env = {**os.environ, "HOME": str(tmp_path), "PYTHONUNBUFFERED": "1"}
    env.pop("RAI_PROFILE", None)
    env.pop("RAI_SERVER", None)
    res = subprocess.run(
        [sys.executable, "-m", "raiclient", "login"], env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60
    )
    assert res.returncode != 0 and "give --server, --access-key, --secret-key" in res.stderr and "Aborted" not in res.stderr, res.stderr
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "raiclient",
            "login",
            "--server",
            docker_service.url.removeprefix("http://"),
            "--access-key",
            "nobody",
            "--secret-key",
            "wrong",
        ],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode != 0 and "did not accept these keys" in res.stderr and "run 'raiclient login'" not in res.stderr, res.stderr
