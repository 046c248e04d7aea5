"""The fault campaign: each fault injected at each moment of a job, against the real service
(Docker executor, a Redis with an append-only file, server and worker as separate processes), and
the invariants checked after each:

- the job ends definite (succeeded, failed, error, cancelled, timed out), requeued or not, within
  BOUND seconds of the fault;
- the stored log holds each line of the job at most once per attempt, in order, and a run cut
  short is followed by a line of rai's that names why (requeue, restart, error);
- the client ends with the job's exit status (exit_code_for) and no traceback, unless it was the
  one killed;
- no container of the job is left, and the next job runs.

Faults: kill -9 of the worker (main process and pool, then started again under the same name, as
`raid dev` does), of the pool process only, of the server (started again), of Redis (started again
on its append-only file), of the client; `docker kill` of the job's container. Moments: during the
upload, queued, at the first command, mid-output, while /build is packed, while it is uploaded.

    python tests/faults/campaign.py            # every fault at every moment; prints the table
    python tests/faults/campaign.py --reduced  # every fault at two moments (what CI runs)

``tests/faults/test_campaign.py`` runs the reduced form under pytest.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import docker
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from helpers import make_project, read_log, start_service, wait_for  # noqa: E402

from raiprotocol.states import JobState, exit_code_for  # noqa: E402
from raiserver.launch import Part, free_port  # noqa: E402

FAULTS = ["worker", "pool", "server", "redis", "client", "container"]
MOMENTS = ["upload", "queued", "first-command", "mid-output", "packing", "build-upload"]
REDUCED_MOMENTS = ["first-command", "mid-output"]
WORKER = "faults"
LABEL = f"rai.worker={WORKER}"
BOUND = 90.0  # seconds from the fault to the job's definite end
LINES = 40
# 40 numbered lines, then 60 MB of random bytes in /build (seconds of packing and uploading)
JOB = (f"sh -c 'for k in $(seq 1 {LINES}); do echo line $k; sleep 0.05; done; "
       "head -c 60000000 /dev/urandom > /build/big; echo last-line'")
DEFINITE = {s.value for s in JobState if s.finished}


@dataclass
class Run:
    fault: str
    moment: str
    hit: str = ""  # where the job was when the fault came
    state: str = ""
    attempts: int = 0
    seconds: float = 0.0  # fault → definite end
    client: str = ""
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


class Campaign:
    """One service for many runs; each run leaves it as it found it (or restarts what it killed)."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.redis_port = free_port()
        self.redis_dir = tmp / "redis"
        self.redis_dir.mkdir(parents=True, exist_ok=True)
        self.redis = self._start_redis()
        self.svc = start_service(tmp / "svc", f"redis://127.0.0.1:{self.redis_port}/0", None, "docker", slots=1, worker=False,
                                 extra_env={"RAI_WORKER_DEAD_AFTER": "15", "RAI_MAX_ACTIVE_JOBS": "50",
                                            "RAI_SUBMISSIONS_PER_MINUTE": "1000", "RAI_BUILD_MB": "128"})
        self.svc.start_worker(WORKER)  # a name of its own: no other test's worker removes its containers
        self.docker = docker.from_env()
        self.n = 0
        self.before: set[Path] = set()

    def _start_redis(self) -> Part:
        binary = "/usr/bin/redis-server" if os.path.exists("/usr/bin/redis-server") else "redis-server"
        part = Part("redis", [binary, "--port", str(self.redis_port), "--bind", "127.0.0.1", "--save", "",
                              "--appendonly", "yes", "--appendfsync", "always", "--dir", str(self.redis_dir)],
                    dict(os.environ), self.tmp / "redis.log").start()
        import redis

        wait_for(lambda: _pings(redis.Redis(port=self.redis_port)), what="redis-server")
        return part

    def close(self) -> None:
        self.svc.shutdown()
        self.redis.stop()

    # -- one run ----------------------------------------------------------------------------------
    def run(self, fault: str, moment: str) -> Run:
        self.n += 1
        result = Run(fault, moment)
        proj = make_project(self.tmp / f"p{self.n}", [JOB], files={"data.bin": os.urandom(20 * 1024 * 1024).hex()[:30_000_000]})
        blocker = None
        if moment == "queued":  # the one slot busy: the job waits
            blocker = self.svc.popen_client("submit", "-p", str(make_project(self.tmp / f"b{self.n}", ["sleep 4"])))
            wait_for(lambda: self._running_jobs() >= 1, timeout=30, what="the blocker running")
        tmp = self.svc.data / "storage" / "tmp"
        self.before = set(tmp.glob("*.part"))  # a killed server's earlier partial file is swept later (2 min), not this run's
        client = self.svc.popen_client("submit", "-p", str(proj))
        out: list[str] = []
        import threading

        reader = threading.Thread(target=lambda: out.extend(iter(client.stdout.readline, "")), daemon=True)
        reader.start()
        try:
            jid, result.hit = self._wait_for_moment(moment, out)
        except AssertionError as exc:
            result.problems.append(f"moment not reached: {exc}")
            client.kill()
            return result
        injected = time.monotonic()
        self._inject(fault, client, jid)
        if jid is None:  # during the upload: a job exists only if the upload got through
            try:
                jid = wait_for(lambda: self._job_id(out) or (client.poll() is not None and "none"), timeout=60, interval=0.05,
                               what="the upload's end")
            except AssertionError:
                jid = "none"
        if jid == "none":
            self._check_refused_upload(result, client)
        else:
            self._check(result, jid, client, out, injected)
        if blocker is not None:
            blocker.communicate(timeout=60)
        return result

    def _running_jobs(self) -> int:
        with self.svc.http() as h:
            try:
                return sum(j["state"] == "running" for j in h.get("/api/v1/jobs", params={"all": "true", "limit": 20}).json()["jobs"])
            except (httpx.HTTPError, ValueError, KeyError):
                return 0

    def _job_id(self, out: list[str]) -> str | None:
        return next((line.split()[2] for line in out if " queued on " in line), None)

    def _wait_for_moment(self, moment: str, out: list[str]) -> tuple[str | None, str]:
        tmp = self.svc.data / "storage" / "tmp"
        if moment == "upload":  # inject as soon as the archive streams in
            wait_for(lambda: any(tmp.glob("*.part")) or self._job_id(out), timeout=60, interval=0.002, what="the upload")
            jid = self._job_id(out)
            return jid, "uploaded already" if jid else "uploading"
        jid = self._await_id(out)
        if moment == "queued":
            return jid, self._state(jid)
        if moment == "first-command":
            wait_for(lambda: "line 1\n" in out, timeout=60, interval=0.01, what="the first line")
        elif moment == "mid-output":
            wait_for(lambda: f"line {LINES // 2}\n" in out, timeout=60, interval=0.01, what="mid-output")
        elif moment == "packing":
            wait_for(lambda: "last-line\n" in out, timeout=90, interval=0.01, what="the last line")
            time.sleep(0.3)
        elif moment == "build-upload":
            wait_for(lambda: "last-line\n" in out, timeout=90, interval=0.01, what="the last line")
            wait_for(lambda: any(tmp.glob("*.part")), timeout=30, interval=0.005, what="the build upload")
        return jid, self._state(jid)

    def _await_id(self, out: list[str]) -> str:
        return wait_for(lambda: self._job_id(out), timeout=60, interval=0.01, what="the job id")

    def _state(self, jid: str) -> str:
        try:
            with self.svc.http() as h:
                return h.get(f"/api/v1/jobs/{jid}").json()["state"]
        except (httpx.HTTPError, ValueError, KeyError):
            return "?"

    def _inject(self, fault: str, client: subprocess.Popen, jid: str | None) -> None:
        svc = self.svc
        if fault == "worker":
            svc.stop(f"worker-{WORKER}", signal.SIGKILL)
            svc.start_worker(WORKER)
        elif fault == "pool":
            main = svc.procs[f"worker-{WORKER}"].pid
            for pid in open(f"/proc/{main}/task/{main}/children").read().split():
                os.kill(int(pid), signal.SIGKILL)
        elif fault == "server":
            svc.stop("server", signal.SIGKILL)
            svc.start_server()
        elif fault == "redis":
            self.redis.stop(signal.SIGKILL)
            self.redis = self._start_redis()
        elif fault == "client":
            os.killpg(client.pid, signal.SIGKILL)
        elif fault == "container":
            for c in self.docker.containers.list(filters={"label": LABEL}):
                if jid is not None and c.name.startswith(f"rai-{jid.lower()}"):
                    c.kill()

    def _check_refused_upload(self, result: Run, client: subprocess.Popen) -> None:
        """The upload was cut by the fault: no job; the client says so, with a status, no traceback."""
        result.state = "no job"
        err = _client_end(result, client, 60, "the client hung after its upload was cut")
        if result.fault != "client" and (client.returncode == 0 or "Traceback" in (err or "") or "error" not in (err or "")):
            result.problems.append(f"the client ended {client.returncode} without naming the trouble: {(err or '')[-200:]}")
        tmp = self.svc.data / "storage" / "tmp"
        # the server notices the cut connection and removes its file (at the latest its body-idle cut, 30 s)
        deadline = time.monotonic() + 40
        while set(tmp.glob("*.part")) - self.before and time.monotonic() < deadline:
            time.sleep(0.1)
        leftovers = set(tmp.glob("*.part")) - self.before
        if leftovers and result.fault not in ("server",):  # a killed server's are swept at its next start
            result.problems.append(f"{len(leftovers)} partial upload(s) left in storage")
        self._next_job_runs(result)

    def _next_job_runs(self, result: Run) -> None:
        nxt = self.svc.client("submit", "-p", str(make_project(self.tmp / f"n{self.n}", ["echo next-ok"])), timeout=120)
        if nxt.returncode != 0 or "next-ok" not in nxt.stdout:
            result.problems.append(f"the next job did not run ({nxt.returncode}): {(nxt.stdout + nxt.stderr)[-300:]}")

    def _check(self, result: Run, jid: str, client: subprocess.Popen, out: list[str], injected: float) -> None:
        deadline = injected + BOUND
        job: dict = {}
        while time.monotonic() < deadline:
            try:
                with self.svc.http() as h:
                    job = h.get(f"/api/v1/jobs/{jid}").json()
            except (httpx.HTTPError, ValueError):
                job = {}
            if job.get("state") in DEFINITE:
                break
            time.sleep(0.2)
        result.seconds = round(time.monotonic() - injected, 1)
        result.state = job.get("state", "?")
        if result.state not in DEFINITE:
            result.problems.append(f"not definite {BOUND:.0f} s after the fault ({result.state})")
        err = _client_end(result, client, 30, "the client did not end with the job")
        if result.fault != "client" and result.state in DEFINITE:
            expected = exit_code_for(JobState(result.state), job.get("exit_code"))
            if client.returncode != expected:
                result.problems.append(f"client exit {client.returncode}, expected {expected}")
            if "Traceback" in (err or ""):
                result.problems.append("a traceback from the client")
        # the stored log
        with self.svc.http() as h:
            log = read_log(h, jid) if result.state in DEFINITE else []
        result.attempts = job.get("attempt", 0) or 1 + sum("goes back in the queue" in line["text"] for line in log if line["s"] == "sys")
        result.problems += log_problems(log, result.state)
        # leftovers, then the next job
        try:
            wait_for(lambda: not [c for c in self.docker.containers.list(filters={"label": LABEL})
                                  if c.name.startswith(f"rai-{jid.lower()}")], timeout=15, what="the job's container gone")
        except AssertionError:
            result.problems.append("the job's container was left running")
        self._next_job_runs(result)


def _client_end(result: Run, client: subprocess.Popen, timeout: float, problem: str) -> str:
    """The client's stderr once it ended (killed, and the problem noted, if it did not in time)."""
    try:
        _, err = client.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        client.kill()
        _, err = client.communicate()
        result.problems.append(problem)
    result.client = str(client.returncode)
    return err or ""


def log_problems(log: list[dict], state: str) -> list[str]:
    """Each line at most once per attempt, in order; a run cut short is followed by rai's reason."""
    problems = []
    attempts: list[list[int]] = [[]]
    reasons: list[str] = []
    for line in log:
        text = line["text"]
        if line["s"] == "sys" and ("goes back in the queue" in text or text.startswith("Restarting on")):
            if attempts[-1]:
                attempts.append([])
            reasons.append(text)
        elif line["s"] != "sys" and text.startswith("line ") and text[5:].isdigit():
            attempts[-1].append(int(text[5:]))
    for i, numbers in enumerate(attempts):
        if numbers != sorted(set(numbers)):
            problems.append(f"attempt {i + 1}: a line twice or out of order")
        elif numbers and numbers != list(range(numbers[0], numbers[-1] + 1)):
            problems.append(f"attempt {i + 1}: a gap in its lines")
        cut = numbers and numbers[-1] < LINES
        if cut and i == len(attempts) - 1 and state == "succeeded":
            problems.append(f"attempt {i + 1} is cut short yet the job succeeded")
        if cut and i < len(attempts) - 1 and not reasons:
            problems.append(f"attempt {i + 1} is cut short with no reason given")
    return problems


def _pings(r) -> bool:
    try:
        return bool(r.ping())
    except Exception:  # noqa: BLE001 - not up yet
        return False


def table(runs: list[Run]) -> str:
    rows = [("fault", "moment", "hit", "state", "attempts", "s to end", "client", "result")]
    rows += [(r.fault, r.moment, r.hit, r.state, str(r.attempts), f"{r.seconds:g}", r.client,
              "ok" if r.ok else "; ".join(r.problems)) for r in runs]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[-1] for row in rows)


def main() -> int:
    reduced = "--reduced" in sys.argv
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # stop the service's parts on the way out
    tmp = Path(tempfile.mkdtemp(prefix="rai-faults-"))
    campaign = Campaign(tmp)
    runs = []
    try:
        for moment in REDUCED_MOMENTS if reduced else MOMENTS:
            for fault in FAULTS:
                runs.append(campaign.run(fault, moment))
                print(table(runs[-1:]).splitlines()[-1], flush=True)
    finally:
        campaign.close()
    print(table(runs))
    worst = max((r.seconds for r in runs), default=0)
    print(f"{sum(r.ok for r in runs)} of {len(runs)} runs kept every invariant; slowest definite end {worst:g} s "
          f"after its fault (bound {BOUND:.0f} s)")
    return 0 if all(r.ok for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
