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

Faults that pause instead of kill (issue 33), each for PAUSE seconds, longer than a run's lease and
its margin: SIGSTOP of the worker's main process, of its pool process, of the server; the worker
cut off from the server (HTTP) or from the server and Redis, through proxies the campaign controls;
a FLUSHALL of Redis; and a worker killed between the job's release and its claim. Two workers serve
the queue, so that a job wrongly taken for lost runs elsewhere at once; more invariants:

- never two runs of one job at once (its containers sampled every 0.2 s);
- the lines the client printed equal the stored log's;
- definite within BOUND of the fault's end.

Faults across the lease's window (issue 51), on a job whose command runs through the whole fault
(LEASE_JOB): the worker paused *whole* (SIGSTOP of its process group, as `docker compose pause`
or a VM stall would: main process, pool, every thread; the job's container is not its process
and runs on), its pool process paused, and the worker cut off from the server and Redis, each for lengths swept from a
heartbeat below the lease to past its margin (``group-stop@13``: 13 s), during the command and
during the /build upload. More invariants there: the job succeeds (a run the lease machinery
stopped runs again: it never ends as the student's failure) and it is definite within
LEASE_BOUND of the fault's end.

    python tests/faults/campaign.py            # every fault at every moment; prints the table
    python tests/faults/campaign.py --reduced  # every fault at two moments (what CI runs)
    python tests/faults/campaign.py --lease    # the lease window's sweep alone

``tests/faults/test_campaign.py`` runs the reduced form under pytest.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import docker
import docker.errors
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from helpers import make_project, read_log, start_service, wait_for  # noqa: E402
from helpers.proxy import Proxy  # noqa: E402

from raiprotocol.states import JobState, exit_code_for  # noqa: E402
from raiserver.ops.launch import Part, free_port  # noqa: E402

FAULTS = ["worker", "pool", "server", "redis", "client", "container"]
PAUSES = ["worker-stop", "pool-stop", "server-stop", "cut-http", "cut-all", "flush", "unclaimed", "group-stop"]  # issues 33, 51
MOMENTS = ["upload", "queued", "first-command", "mid-output", "packing", "build-upload"]
PAUSE_MOMENTS = ["first-command", "mid-output", "packing"]
REDUCED_MOMENTS = ["first-command", "mid-output"]
# CI's: each pause once (the pool paused past the window is the whole worker's case, group-stop, for
# what a rerun beside it would show; REDUCED_LEASE pauses the pool within the window)
REDUCED_PAUSES = [(fault, "mid-output") for fault in PAUSES if fault != "pool-stop"] + [("flush", "queued")]
WORKERS = ["faults", "faults2"]
WORKER = WORKERS[0]
LEASE = 15.0  # RAI_WORKER_DEAD_AFTER here
MARGIN = 5.0
PAUSE = LEASE + MARGIN + 5  # longer than a lease and its margin: what a run taken for lost would show
BOUND = 90.0  # seconds from the fault (its end, for a pause) to the job's definite end
LINES = 40
# 40 numbered lines, then 60 MB of random bytes in /build (seconds of packing and uploading)
JOB = f"sh -c 'for k in $(seq 1 {LINES}); do echo line $k; sleep 0.05; done; head -c 60000000 /dev/urandom > /build/big; echo last-line'"
DEFINITE = {s.value for s in JobState if s.finished}
# Issue 51: a command that runs through the whole fault (25 s), for the faults across the lease's
# window, swept from a heartbeat below the lease (10 s) past the lease and its margin (22 s)
LEASE_LINES = 250
LEASE_JOB = (
    f"sh -c 'for k in $(seq 1 {LEASE_LINES}); do echo line $k; sleep 0.1; done; head -c 20000000 /dev/urandom > /build/big; echo last-line'"
)
LEASE_FAULTS = ["group-stop", "pool-stop", "cut-all"]
LEASE_LENGTHS = [10, 13, 16, 19, 22]
LEASE_MOMENTS = ["mid-output", "build-upload"]
LEASE_BOUND = 60.0  # seconds from the fault's end to the job's definite end
# CI's: a pool paused past the lease but within its margin (before issue 51 the worker's main process
# removed the container and the student read "killed by signal 9 (out of memory?)"), a whole worker
# paused about the lease's length
REDUCED_LEASE = [("pool-stop@17", "mid-output"), ("group-stop@14", "mid-output")]


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
        self.svc = start_service(
            tmp / "svc",
            f"redis://127.0.0.1:{self.redis_port}/0",
            None,
            "docker",
            slots=1,
            worker=False,
            extra_env={
                "RAI_WORKER_DEAD_AFTER": f"{LEASE:g}",
                "RAI_LEASE_MARGIN": f"{MARGIN:g}",
                "RAI_MAX_ACTIVE_JOBS": "50",
                "RAI_SUBMISSIONS_PER_MINUTE": "1000",
                "RAI_BUILD_MB": "128",
            },
        )
        # each worker reaches the server and Redis through proxies of its own: a partition cuts one
        self.redis_db = self.svc.env["RAI_REDIS_URL"].rsplit("/", 1)[1]
        self.proxies = {w: (Proxy(self.svc.port), Proxy(self.redis_port)) for w in WORKERS}
        for w in WORKERS:  # names of their own: no other test's worker removes their containers
            self._start_worker(w)
        self.docker = docker.from_env()
        self.pause = PAUSE  # how long a pause or a cut lasts
        self.lines = LINES  # the job's numbered lines
        self.n = 0
        self.before: set[Path] = set()

    def _start_redis(self) -> Part:
        binary = "/usr/bin/redis-server" if os.path.exists("/usr/bin/redis-server") else "redis-server"
        part = Part(
            "redis",
            [
                binary,
                "--port",
                str(self.redis_port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--dir",
                str(self.redis_dir),
            ],
            dict(os.environ),
            self.tmp / "redis.log",
        ).start()
        import redis

        wait_for(lambda: _pings(redis.Redis(port=self.redis_port)), what="redis-server")
        return part

    def _start_worker(self, name: str) -> None:
        http, red = self.proxies[name]
        self.svc.start_worker(
            name, RAI_SERVER_URL=f"http://127.0.0.1:{http.port}", RAI_REDIS_URL=f"redis://127.0.0.1:{red.port}/{self.redis_db}"
        )

    def close(self) -> None:
        self.svc.shutdown()
        self.redis.stop()
        for pair in self.proxies.values():
            for p in pair:
                p.close()

    # -- one run ----------------------------------------------------------------------------------
    def run(self, fault: str, moment: str) -> Run:
        self.n += 1
        result = Run(fault, moment)
        swept = "@" in fault  # across the lease's window (group-stop@13: 13 s): the job's command runs through the fault
        self.lines = LEASE_LINES if swept else LINES
        proj = make_project(
            self.tmp / f"p{self.n}", [LEASE_JOB if swept else JOB], files={"data.bin": os.urandom(20 * 1024 * 1024).hex()[:30_000_000]}
        )
        blockers = []
        if moment == "queued":  # every slot busy: the job waits
            blockers = [
                self.svc.popen_client("submit", "-p", str(make_project(self.tmp / f"b{self.n}-{i}", ["sleep 6"])))
                for i in range(len(WORKERS))
            ]
            wait_for(lambda: self._running_jobs() >= len(WORKERS), timeout=30, what="the blockers running")
        if fault == "unclaimed":  # the job will be released to a worker whose pool cannot claim it
            held = self._stop_pools(WORKERS)
        tmp = self.svc.data / "storage" / "tmp"
        self.before = set(tmp.glob("*.part"))  # a killed server's earlier partial file is swept later (2 min), not this run's
        client = self.svc.popen_client("submit", "-p", str(proj))
        out: list[str] = []
        import threading

        err: list[str] = []
        self.readers = [
            threading.Thread(target=lambda: out.extend(iter(client.stdout.readline, "")), daemon=True),
            threading.Thread(target=lambda: err.extend(iter(client.stderr.readline, "")), daemon=True),
        ]
        self.err = err
        for reader in self.readers:
            reader.start()
        try:
            if fault == "unclaimed":
                jid = self._await_id(out)
                wait_for(lambda: self._job(jid).get("released_at"), timeout=30, what="the release")
                time.sleep(1.0)  # a worker's main process has taken the message for its (stopped) pool
                result.hit = "released"
            else:
                jid, result.hit = self._wait_for_moment(moment, out)
        except AssertionError as exc:
            result.problems.append(f"moment not reached: {exc}")
            client.kill()
            return result
        runs = RunWatch(self.docker, jid) if jid is not None else None
        if fault == "unclaimed":
            self._kill_and_restart(WORKERS, held)
        else:
            self._inject(fault, client, jid)
        injected = time.monotonic()
        if jid is None:  # during the upload: a job exists only if the upload got through
            try:
                jid = wait_for(
                    lambda: self._job_id(out) or (client.poll() is not None and "none"), timeout=60, interval=0.05, what="the upload's end"
                )
            except AssertionError:
                jid = "none"
        if jid == "none":
            self._check_refused_upload(result, client)
        else:
            self._check(result, jid, client, out, injected, LEASE_BOUND if swept else BOUND)
            if swept and result.state != "succeeded":  # a run stopped by the lease runs again, never fails
                result.problems.append(f"an honest job ended {result.state}")
        if runs is not None:
            most = runs.stop()
            if most > 1:
                result.problems.append(f"{most} runs of the job at once")
        for blocker in blockers:
            blocker.communicate(timeout=90)
        return result

    def _client_end(self, result: Run, client: subprocess.Popen, timeout: float, problem: str) -> str:
        """The client's stderr once it ended (killed, and the problem noted, if it did not in
        time); its stdout is all in the run's list then (one reader each: what the client
        printed is compared with the stored log)."""
        try:
            client.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            client.kill()
            client.wait()
            result.problems.append(problem)
        for reader in self.readers:
            reader.join(timeout=10)
        result.client = str(client.returncode)
        return "".join(self.err)

    def _job(self, jid: str) -> dict:
        try:
            with self.svc.http() as h:
                return h.get(f"/api/v1/jobs/{jid}").json()
        except (httpx.HTTPError, ValueError):
            return {}

    def _holder(self, jid: str | None) -> str:
        """The worker running the job (the first one if none does yet)."""
        name = self._job(jid).get("worker") if jid else None
        return name if name in WORKERS else WORKER

    def _pools(self, name: str) -> list[int]:
        main = self.svc.procs[f"worker-{name}"].pid
        return [int(pid) for pid in open(f"/proc/{main}/task/{main}/children").read().split()]

    def _stop_pools(self, names: list[str]) -> list[int]:
        pids = [pid for name in names for pid in self._pools(name)]
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        return pids

    def _kill_and_restart(self, names: list[str], pools: list[int]) -> None:
        for name in names:
            self.svc.stop(f"worker-{name}", signal.SIGKILL)
        for pid in pools:
            with _gone():
                os.kill(pid, signal.SIGKILL)
        for name in names:
            self._start_worker(name)

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
            at = 30 if self.lines == LEASE_LINES else LINES // 2  # a lease fault: long before the command's end
            wait_for(lambda: f"line {at}\n" in out, timeout=60, interval=0.01, what="mid-output")
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
        """The fault; a pause returns once it is over. ``group-stop@13``: a pause or cut of 13 s
        (else ``self.pause``)."""
        svc = self.svc
        fault, _, length = fault.partition("@")
        pause = float(length) if length else self.pause
        holder = self._holder(jid)
        if fault == "worker":
            svc.stop(f"worker-{holder}", signal.SIGKILL)
            self._start_worker(holder)
        elif fault == "pool":
            for pid in self._pools(holder):
                os.kill(pid, signal.SIGKILL)
        elif fault in ("worker-stop", "pool-stop", "server-stop"):
            self._pause_processes(fault, holder, pause)
        elif fault == "group-stop":  # the whole worker: its process group, every process and thread
            group = svc.procs[f"worker-{holder}"].pid  # its own session: the group's id is its pid
            os.killpg(group, signal.SIGSTOP)
            time.sleep(pause)
            with _gone():
                os.killpg(group, signal.SIGCONT)
        elif fault in ("cut-http", "cut-all"):
            self._cut(fault, holder, pause)
        elif fault == "flush":
            import redis

            redis.Redis(port=self.redis_port).flushall()
        elif fault == "server":
            svc.stop("server", signal.SIGKILL)
            svc.start_server()
        elif fault == "redis":
            self.redis.stop(signal.SIGKILL)
            self.redis = self._start_redis()
        elif fault == "client":
            os.killpg(client.pid, signal.SIGKILL)
        elif fault == "container":
            # By name from one listing: containers.list() inspects each container it lists, and a
            # spare that another worker removes meanwhile failed the whole kill with a 404.
            for name in job_containers(self.docker, jid, running=True) if jid is not None else []:
                with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                    self.docker.api.kill(name)

    def _pause_processes(self, fault: str, holder: str, pause: float) -> None:
        """SIGSTOP for the pause, then SIGCONT: the worker, its pool or the server, frozen."""
        svc = self.svc
        pids = {
            "worker-stop": lambda: [svc.procs[f"worker-{holder}"].pid],
            "pool-stop": lambda: self._pools(holder),
            "server-stop": lambda: [svc.procs["server"].pid],
        }[fault]()
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        time.sleep(pause)
        for pid in pids:
            with _gone():
                os.kill(pid, signal.SIGCONT)

    def _cut(self, fault: str, holder: str, pause: float) -> None:
        """The holder's HTTP (or HTTP and Redis) connections cut for the pause, then healed."""
        http, red = self.proxies[holder]
        cut = [http, red] if fault == "cut-all" else [http]
        for p in cut:
            p.cut()
        time.sleep(pause)
        for p in cut:
            p.heal()

    def _check_refused_upload(self, result: Run, client: subprocess.Popen) -> None:
        """The upload was cut by the fault: no job; the client says so, with a status, no traceback."""
        result.state = "no job"
        err = self._client_end(result, client, 60, "the client hung after its upload was cut")
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

    def _check(self, result: Run, jid: str, client: subprocess.Popen, out: list[str], injected: float, bound: float = BOUND) -> None:
        deadline = injected + bound
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
            result.problems.append(f"not definite {bound:.0f} s after the fault ({result.state})")
        err = self._client_end(result, client, 30, "the client did not end with the job")
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
        result.problems += log_problems(log, result.state, self.lines)
        if result.fault != "client" and result.state in DEFINITE and client.returncode is not None:
            printed = [line.rstrip("\n") for line in out if _job_line(line.rstrip("\n"))]
            stored = [line["text"] for line in log if line["s"] != "sys" and _job_line(line["text"])]
            if printed != stored:
                result.problems.append(f"the client printed {len(printed)} job lines, the stored log holds {len(stored)}")
        # leftovers, then the next job
        try:
            wait_for(lambda: not job_containers(self.docker, jid, running=False), timeout=15, what="the job's container gone")
        except AssertionError:
            result.problems.append("the job's container was left running")
        self._next_job_runs(result)


def _job_line(text: str) -> bool:
    return text == "last-line" or (text.startswith("line ") and text[5:].isdigit())


class _gone:
    """Signals to a process that may have ended meanwhile."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, exc, tb) -> bool:
        return kind is ProcessLookupError


def job_containers(client, jid: str, running: bool) -> list[str]:
    """The names of the job's containers (all, or running only), from one listing: no per-container
    look-up that a removal meanwhile would fail."""
    rows = client.api.containers(all=not running, filters={"label": "rai.worker"})
    names = [n.lstrip("/") for row in rows for n in row.get("Names") or []]
    return [n for n in names if n.startswith(f"rai-{jid.lower()}")]


class RunWatch:
    """Samples the job's running containers every 0.2 s: the most seen at once."""

    def __init__(self, client, jid: str):
        import threading

        self.client, self.jid, self.most = client, jid, 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        while not self.done.wait(0.2):
            try:
                self.most = max(self.most, len(job_containers(self.client, self.jid, running=True)))
            except Exception:  # noqa: BLE001 - the engine busy: the next sample
                continue

    def stop(self) -> int:
        self.done.set()
        self.thread.join(timeout=5)
        return self.most


def log_problems(log: list[dict], state: str, lines: int = LINES) -> list[str]:
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
        cut = numbers and numbers[-1] < lines
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
    rows += [
        (r.fault, r.moment, r.hit, r.state, str(r.attempts), f"{r.seconds:g}", r.client, "ok" if r.ok else "; ".join(r.problems))
        for r in runs
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + "  " + row[-1] for row in rows)


def lease_plan(reduced: bool) -> list[tuple[str, str]]:
    """The faults across the lease's window: every kind, length and moment (or CI's few)."""
    if reduced:
        return REDUCED_LEASE
    return [(f"{fault}@{n}", moment) for moment in LEASE_MOMENTS for fault in LEASE_FAULTS for n in LEASE_LENGTHS]


def main() -> int:
    reduced = "--reduced" in sys.argv
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # stop the service's parts on the way out
    tmp = Path(tempfile.mkdtemp(prefix="rai-faults-"))
    campaign = Campaign(tmp)
    runs = []
    plan = [(f, m) for m in (REDUCED_MOMENTS if reduced else MOMENTS) for f in FAULTS]
    plan += REDUCED_PAUSES if reduced else [(f, m) for m in PAUSE_MOMENTS for f in PAUSES] + [("flush", "queued")]
    plan += lease_plan(reduced)
    if "--lease" in sys.argv:
        plan = lease_plan(reduced)
    try:
        for fault, moment in plan:
            runs.append(campaign.run(fault, moment))
            print(table(runs[-1:]).splitlines()[-1], flush=True)
    finally:
        campaign.close()
    print(table(runs))
    worst = max((r.seconds for r in runs), default=0)
    print(
        f"{sum(r.ok for r in runs)} of {len(runs)} runs kept every invariant; slowest definite end {worst:g} s "
        f"after its fault (bound {BOUND:.0f} s)"
    )
    return 0 if all(r.ok for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
