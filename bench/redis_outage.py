"""Redis paused and then killed under load, through the service as `raid dev` runs it (by hand; a
minute and a half): one client lists jobs as fast as it can and another submits a job every 1.5 s,
while Redis is stopped whole (SIGSTOP) for PAUSE seconds and later killed (SIGKILL; `raid dev`
starts it again, its append-only file kept). Prints, per second, the answers and the slowest
one, what the failed answers said, and how every submitted job ended: none may stay stuck, run
twice or lose its log.

    .venv/bin/python bench/redis_outage.py [--pause 8] [--port 8031] [--keep] [--quick]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pause", type=float, default=8.0)
    ap.add_argument("--port", type=int, default=8031)
    ap.add_argument("--keep", action="store_true", help="keep the instance's folder (its logs) and say where")
    ap.add_argument("--quick", action="store_true", help="each phase a third as long (the reduced run in CI)")
    args = ap.parse_args(argv)
    scale = 1 / 3 if args.quick else 1.0
    from raiprotocol.profile import read_profile_file

    tmp = Path(tempfile.mkdtemp(prefix="rai-redis-outage-"))
    data = tmp / "d"
    env = {**os.environ, "HOME": str(tmp)}
    log = (tmp / "raid.log").open("w")
    raid = subprocess.Popen(
        [str(ROOT / ".venv/bin/raid"), "dev", "--data-dir", str(data), "--port", str(args.port), "--executor", "process", "--gpus", "none"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{args.port}"
    answers: list[tuple[float, int | str, float]] = []  # (second, status, seconds taken)
    said: collections.Counter[str] = collections.Counter()
    jobs: list[str] = []
    refused: list[str] = []
    stop = threading.Event()
    try:
        deadline = time.monotonic() + 120
        while "web view:" not in (tmp / "raid.log").read_text():
            if time.monotonic() > deadline or raid.poll() is not None:
                raise SystemExit("raid dev did not come up:\n" + (tmp / "raid.log").read_text()[-2000:])
            time.sleep(0.5)
        prof = read_profile_file(data / "admin.rai_profile")
        t0 = time.monotonic()

        def lister() -> None:
            with httpx.Client(base_url=url, auth=(prof.access_key, prof.secret_key), timeout=30) as h:
                turn = 0
                while not stop.is_set():
                    turn += 1
                    # the job list (PostgreSQL), /healthz, and the log of the latest job (Redis while it runs)
                    path = ("/api/v1/jobs", "/healthz", f"/api/v1/jobs/{jobs[-1]}/log" if jobs else "/healthz")[turn % 3]
                    start = time.monotonic()
                    try:
                        r = h.get(path, params={"follow": "false"} if path.endswith("/log") else {"all": "true"})
                        status: int | str = r.status_code
                        whole = any(f"event: {e}" in r.text for e in ("caught_up", "end"))
                        if path.endswith("/log") and r.status_code == 200 and not whole:
                            status = "cut"  # a stream that ends without its last event: the client resumes it
                            said["log: a stream cut (no caught_up or end)"] += 1
                        elif r.status_code >= 400:
                            said[f"{path.split('/')[-1]}: {r.status_code} {r.text[:160]}"] += 1
                    except httpx.HTTPError as exc:
                        status = type(exc).__name__
                        said[f"{path.split('/')[-1]}: {status}"] += 1
                    answers.append((start - t0, status, time.monotonic() - start))

        def submitter() -> None:
            cli_env = {**env, "RAI_PROFILE": str(data / "admin.rai_profile"), "RAI_SERVER": url}
            while not stop.is_set():
                res = subprocess.run(
                    [sys.executable, "-m", "raiclient", "submit", "-p", str(ROOT / "examples/hello"), "--detach"],
                    env=cli_env,
                    capture_output=True,
                    text=True,
                    timeout=120,
                )
                ids = [w for line in res.stdout.splitlines() if " queued on " in line for w in line.split()[2:3]]
                if ids:
                    jobs.append(ids[0])
                else:
                    refused.append(f"{time.monotonic() - t0:.1f}s rc={res.returncode}: {(res.stderr or res.stdout).strip()[:200]}")
                stop.wait(1.5)

        threads = [threading.Thread(target=lister), threading.Thread(target=submitter)]
        for t in threads:
            t.start()
        time.sleep(10 * scale)
        pid = redis_pid_of(data)
        print(f"[{time.monotonic() - t0:5.1f}s] Redis (pid {pid}) stopped whole for {args.pause:g} s")
        os.kill(pid, signal.SIGSTOP)
        time.sleep(args.pause)
        os.kill(pid, signal.SIGCONT)
        print(f"[{time.monotonic() - t0:5.1f}s] Redis goes on")
        time.sleep(15 * scale)
        pid = redis_pid_of(data)
        print(f"[{time.monotonic() - t0:5.1f}s] Redis (pid {pid}) killed")
        os.kill(pid, signal.SIGKILL)
        time.sleep(25 * scale)
        stop.set()
        for t in threads:
            t.join(timeout=150)
        print(f"[{time.monotonic() - t0:5.1f}s] load stopped; {len(jobs)} jobs submitted, {len(refused)} submissions refused")
        ended, logs_ok = outcomes(url, (prof.access_key, prof.secret_key), jobs)
        report(answers, said, refused, jobs, ended, logs_ok)
        print("raid dev said:", *[line for line in (tmp / "raid.log").read_text().splitlines() if "redis" in line.lower()][:6], sep="\n  ")
        server_log = (data / "logs" / "server.log").read_text(errors="replace")
        print(f"the server's log: {server_log.count('Traceback')} tracebacks, {len(server_log.splitlines())} lines; its errors:")
        bad = [line for line in server_log.splitlines() if " ERROR " in line or "Error" in line]
        errors = collections.Counter(line.split(" ", 2)[-1][:150] for line in bad)
        for text, n in errors.most_common(6):
            print(f"  {n:5d} × {text}")
    finally:
        stop.set()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(raid.pid, signal.SIGTERM)
        raid.wait(60)
        if args.keep:
            print(f"kept: {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def outcomes(url: str, auth: tuple[str, str], jobs: list[str]) -> tuple[dict[str, str], int]:
    """How each job ended (waiting up to 120 s for them), and how many logs hold the job's line."""
    ended: dict[str, str] = {}
    with httpx.Client(base_url=url, auth=auth, timeout=30) as h:
        until = time.monotonic() + 120
        while time.monotonic() < until and len(ended) < len(jobs):
            for jid in jobs:
                if jid not in ended:
                    j = h.get(f"/api/v1/jobs/{jid}").json()
                    if j.get("state") not in ("queued", "running"):
                        ended[jid] = j["state"]
            time.sleep(1)
        logs_ok = sum(h.get(f"/api/v1/jobs/{jid}/log.txt").text.count("hello") >= 1 for jid in ended)
    return ended, logs_ok


def report(
    answers: list[tuple[float, int | str, float]],
    said: collections.Counter[str],
    refused: list[str],
    jobs: list[str],
    ended: dict[str, str],
    logs_ok: int,
) -> None:
    per_second: dict[int, list[tuple[int | str, float]]] = collections.defaultdict(list)
    for at, status, took in answers:
        per_second[int(at)].append((status, took))
    print("second  answers  failed  slowest   (failed: an error, or a log stream cut)")
    for sec in sorted(per_second):
        got = per_second[sec]
        failed = sum(1 for s, _ in got if not (isinstance(s, int) and s < 400))
        print(f"{sec:6d}  {len(got):7d}  {failed:6d}  {max(t for _, t in got):6.2f} s")
    print("what the failed answers said:")
    for text, n in said.most_common(8):
        print(f"  {n:5d} × {text}")
    print("refused submissions:", *refused[:8], sep="\n  ")
    print(f"jobs: {dict(collections.Counter(ended.values()))}; not ended after 120 s: {len(jobs) - len(ended)}")
    print(f"logs with the job's line: {logs_ok} of {len(ended)}")


def redis_pid_of(data: Path) -> int:
    """The dev instance's redis-server: the one whose working folder is the instance's."""
    want = str((data / "redis").resolve())
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:  # redis-server rewrites its command line to its address; its working folder is its --dir
            if b"redis-server" in Path(f"/proc/{pid}/cmdline").read_bytes() and os.readlink(f"/proc/{pid}/cwd") == want:
                return int(pid)
        except OSError:
            pass
    raise SystemExit("the instance's redis-server is not running")


if __name__ == "__main__":
    main()
