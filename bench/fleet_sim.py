"""A fleet of GPU hosts on one machine (issue 52): simulated worker slots that speak the real
protocol, against a real server, PostgreSQL and Redis, fed by students submitting at a set rate.

Each simulated host is the real worker (``raiworker.celery_app``: Celery over Redis, the claim,
``JobRun`` with its lease renewed over HTTP and through Redis, ``LogSink`` writing each line into
the job's Redis Stream under its fence, the ``/build`` upload, the end report, the heartbeats)
with one thing simulated: what runs in the container. Its executor (``SimExecutor``) prints
``--lines-per-second`` numbered lines for ``--job-seconds`` (read every ``--batch-ms``, as a
worker reads a program's output), then ``Op Time``/``Correctness`` and exits 0. Two changes to
let one machine hold a fleet: a host's slots are threads of one process (Celery's thread pool,
not one process per slot), and each thread keeps its own lease stamp (no container watches it).

The students are real API clients: a roster imported through the API, each submission a packed
project POSTed as ``raiclient submit`` does, followed live over SSE (``--follow``: the share of
students who watch), then the stored log read back. Every line a job printed is checked against
what the live stream showed and what the server stored: lost and duplicated lines are counted.

    .venv/bin/python bench/fleet_sim.py --slots 20 --rate 2 --jobs 200              # small
    nice -n 10 .venv/bin/python bench/fleet_sim.py --slots 200 --rate 20 --seconds 600 --server-processes 4

Targets (issue 52, this 2-core machine): 200 slots, 20 submissions/s for 10 minutes, 100 lines/s
each: 0 errors, 0 lost or duplicated lines, submit->claimed p99 < 1 s, API p99 < 300 ms,
/healthz p99 < 100 ms; server RSS and descriptors flat (within 10 %) over 20,000 jobs.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import logging
import math
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from raiprotocol import logwire
from raiprotocol.models import LogStream
from raiworker.executors.base import Executor, JobContext
from raiworker.logsink import LogSink

sys.path.insert(0, str(Path(__file__).resolve().parent))
from term_pages import private_redis  # noqa: E402 - the term bench's, beside this file

BENCH = Path(__file__).resolve().parent
PG_BASE = os.environ.get("RAI_TEST_PG", "postgresql://postgres@127.0.0.1:5432").replace("postgresql+psycopg://", "postgresql://")
OP_LINES = ["Op Time: 0.001234", "Correctness: 1.0 Model: sim"]


# -- the simulated host -----------------------------------------------------------------------


class SimExecutor(Executor):
    """What runs in the container, simulated: ``emit RATE SECONDS BATCH_MS`` prints RATE numbered
    lines a second for SECONDS (each read of its output holds the lines of BATCH_MS), then the
    results' lines; any other command ends at once with 0. Nothing else of the run is simulated."""

    name = "sim"
    started_phase = "simulated container started"

    def __init__(self) -> None:
        self.killed = threading.Event()

    def start(self, ctx: JobContext, sink: LogSink) -> str:
        return f"started a simulated container (image {ctx.image}; no process runs)"

    def run_command(self, ctx: JobContext, command: str, sink: LogSink) -> int:
        words = command.split()
        if words[:1] != ["emit"]:
            return 0
        rate, seconds, batch = float(words[1]), float(words[2]), float(words[3]) / 1000
        total, sent, start, tick = int(rate * seconds), 0, time.monotonic(), 0
        while sent < total:
            tick += 1
            if self.killed.wait(max(start + tick * batch - time.monotonic(), 0)):
                return 137
            due = min(total, int((time.monotonic() - start) * rate))
            if due > sent:
                sink.feed(LogStream.out, "".join(f"{ctx.job_id} {k}\n" for k in range(sent + 1, due + 1)).encode())
                sent = due
        sink.feed(LogStream.out, ("\n".join(OP_LINES) + "\n").encode())
        (ctx.build_dir / "result.txt").write_text(f"{total} lines\n")
        return 0

    def kill(self) -> None:
        self.killed.set()

    def cleanup(self) -> None:
        self.killed.set()


def _thread_stamp(work_dir: Path) -> Path:
    """Each slot's lease stamp: slots are threads here, and the worker keeps one per pool process."""
    from raiworker.workdir import slot_dir

    return slot_dir(work_dir) / f"thread-{threading.get_ident()}" / "lease" / "until"


def host_main() -> None:
    """One simulated GPU host: the real worker (settings from RAI_*), its slots threads, its executor ``SimExecutor``."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from raiworker.executors import names as executor_names
    from raiworker.run import job as jobrun

    executor_names.EXECUTORS["sim"] = f"{__name__}:SimExecutor"
    jobrun.lease_stamp = _thread_stamp  # type: ignore[assignment]
    from raiworker.celery_app import configure
    from raiworker.config import WorkerSettings
    from raiworker.run.entry import recover
    from raiworker.runtime import WorkerRuntime

    settings = WorkerSettings.load()
    rt = WorkerRuntime(settings, [], max(settings.slots, 1))
    celery = configure(rt)
    settings.work_dir.mkdir(parents=True, exist_ok=True)
    recover(settings)
    celery.worker_main(
        [
            "worker",
            "--loglevel=warning",
            f"--queues={','.join(settings.queues)}",
            f"--concurrency={rt.processes}",
            f"--hostname={settings.worker_name}@%h",
            "--without-gossip",
            "--without-mingle",
            "--pool=threads",
        ]
    )


# -- what is measured -------------------------------------------------------------------------


@dataclass
class Options:
    slots: int = 20
    hosts: int = 0  # 0: one host per 25 slots
    rate: float = 2.0  # submissions a second
    seconds: float = 60.0  # submitting for this long (0: until ``jobs``)
    jobs: int = 0  # or stop after this many (0: no limit)
    lines_per_second: int = 100
    job_seconds: float = 5.0
    batch_ms: int = 100
    server_processes: int = 1
    students: int = 400
    follow: float = 1.0  # share of students who watch their job live
    per_student: int = 2  # jobs a student has unfinished at once: the server's cap (RAI_MAX_ACTIVE_JOBS), kept by the students
    redis_url: str | None = None  # default: a private redis-server
    database_url: str | None = None  # default: a fresh PostgreSQL database, dropped afterwards
    queue: str = "fleet"
    drain_seconds: float = 180.0  # after the last submission, the jobs may take this long to end
    quiet: bool = False
    server_settings: dict[str, str] = field(default_factory=dict)  # more RAI_* settings for the server


@dataclass
class Sample:
    t: float
    done: int
    rss: int  # bytes, all server processes
    fds: int
    hosts_rss: int
    cpu: dict[str, float]  # seconds since start, per part


@dataclass
class Figures:
    submitted: int = 0
    ended: int = 0
    states: Counter[str] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    lost: int = 0
    duplicated: int = 0
    live_lost: int = 0
    live_duplicated: int = 0
    reconnects: int = 0
    reruns: int = 0  # runs of a job after its first (each run's own lines checked)
    lines_checked: int = 0
    claimed: list[float] = field(default_factory=list)  # submit -> claimed, seconds
    released: list[float] = field(default_factory=list)  # submit -> released to the workers (the fair-share release)
    ran: list[float] = field(default_factory=list)  # claimed -> finished
    submit_ms: list[float] = field(default_factory=list)
    api_ms: list[float] = field(default_factory=list)  # every non-streaming call the students make
    healthz_ms: list[float] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    took: float = 0.0
    submitting: float = 0.0  # seconds from the first submission to the last
    held: int = 0  # submissions that waited for one of their student's jobs to end (the per-student cap)
    held_s: list[float] = field(default_factory=list)  # how long each of those waited


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(int(len(s) * q), len(s) - 1)]


def _status(pid: int, key: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def _fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def _cpu(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def _tree(pid: int) -> list[int]:
    """A process and its descendants (uvicorn's worker processes)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        with suppress(OSError):
            for t in os.listdir(f"/proc/{p}/task"):
                todo.extend(int(c) for c in Path(f"/proc/{p}/task/{t}/children").read_text().split())
    return out


def _named(word: bytes) -> list[int]:
    found = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            with suppress(OSError):
                if Path(f"/proc/{p}/cmdline").read_bytes().startswith(word):
                    found.append(int(p))
    return found


# -- the service ------------------------------------------------------------------------------


@contextmanager
def fresh_database() -> Iterator[str]:
    import psycopg

    name = f"rai_fleet_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(f"{PG_BASE}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{PG_BASE.replace('postgresql://', 'postgresql+psycopg://')}/{name}"
    finally:
        with psycopg.connect(f"{PG_BASE}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def project(root: Path, o: Options) -> bytes:
    """The students' project, packed as raiclient packs it: one simulated command."""
    from raiclient.pack import pack_project

    root.mkdir(parents=True, exist_ok=True)
    (root / "rai_build.yml").write_text(
        f"rai:\n  version: 0.2\n  image: rai/busybox:latest\ncommands:\n  build:\n"
        f"    - emit {o.lines_per_second} {o.job_seconds:g} {o.batch_ms}\n"
    )
    (root / "main.cu").write_text("// a student's kernel\n" * 50)
    packed = pack_project(root)
    body = packed.path.read_bytes()
    packed.path.unlink()
    return body


def expected_lines(job_id: str, o: Options) -> list[str]:
    return [f"{job_id} {k}" for k in range(1, int(o.lines_per_second * o.job_seconds) + 1)] + OP_LINES


def compare(seen: list[str], want: list[str]) -> tuple[int, int, int]:
    """(lost, duplicated, runs) of what a job printed, given what was shown. A job that ran again
    (its first run lost its lease, or its release was not claimed in time and it was released
    again) shows each run's lines after a "Restarting" line: an earlier run may stop part way (a
    prefix), the last one must be whole; within a run, a line missing, repeated or out of order
    counts."""
    if seen == want:
        return 0, 0, 1
    first = want[0]
    starts = [i for i, line in enumerate(seen) if line == first] or [0]
    if starts[0] != 0:
        starts.insert(0, 0)
    lost = dup = 0
    for k, begin in enumerate(starts):
        run = seen[begin : starts[k + 1] if k + 1 < len(starts) else len(seen)]
        target = want if k == len(starts) - 1 else want[: len(run)]
        have, need = Counter(run), Counter(target)
        lost += sum((need - have).values())
        dup += sum((have - need).values())
        if have == need:
            lost += sum(a != b for a, b in zip(run, target, strict=False))
    return lost, dup, len(starts)


class Students:
    """The class: each submission POSTed as raiclient does, its log followed over SSE or its status
    polled, then its stored log read back and checked."""

    def __init__(self, url: str, keys: list[tuple[str, str]], body: bytes, o: Options, f: Figures):
        self.url, self.keys, self.body, self.o, self.f = url, keys, body, o, f
        self.client = httpx.AsyncClient(
            base_url=url, timeout=httpx.Timeout(60.0), limits=httpx.Limits(max_connections=None, max_keepalive_connections=400)
        )
        self.rng = random.Random(52)
        self.active = 0
        # a student whose jobs are all still unfinished waits for one to end, as the server's refusal
        # asks ("wait for one to finish"): a backed-up queue slows the class's submissions down
        # instead of turning them into errors; how many waited, and how long, is in the figures
        self.turns = [asyncio.Semaphore(o.per_student) for _ in keys]

    async def timed(self, method: str, path: str, auth: tuple[str, str] | None, **kw: Any) -> httpx.Response:
        t0 = time.perf_counter()
        r = await self.client.request(method, path, auth=auth, **kw)
        self.f.api_ms.append((time.perf_counter() - t0) * 1000)
        return r

    async def one(self, i: int) -> None:
        turn = self.turns[i % len(self.keys)]
        held, t0 = turn.locked(), time.perf_counter()
        async with turn:
            if held:
                self.f.held += 1
                self.f.held_s.append(time.perf_counter() - t0)
            await self._one(i)

    async def _one(self, i: int) -> None:
        o, f = self.o, self.f
        auth = self.keys[i % len(self.keys)]
        self.active += 1
        try:
            t0 = time.perf_counter()
            r = await self.client.post(
                "/api/v1/jobs",
                content=self.body,
                auth=auth,
                headers={"Content-Type": "application/gzip", "Idempotency-Key": uuid.uuid4().hex},
            )
            took = (time.perf_counter() - t0) * 1000
            f.submit_ms.append(took)
            f.api_ms.append(took)
            if r.status_code != 201:
                f.errors.append(f"submit: HTTP {r.status_code} {r.text[:160]}")
                return
            f.submitted += 1
            jid = r.json()["id"]
            follow = self.rng.random() < o.follow
            live, job = await (self.follow(jid, auth) if follow else self.poll(jid, auth))
            stored, _, _ = await self.log_lines(jid, auth, follow=False)
            self.judge(jid, job, live if follow else None, stored)
        except httpx.HTTPError as exc:
            f.errors.append(f"job {i}: {exc!r}")
        finally:
            self.active -= 1

    def judge(self, jid: str, job: dict[str, Any], live: list[str] | None, stored: list[str]) -> None:
        f = self.f
        f.ended += 1
        f.states[job["state"]] += 1
        if job["state"] != "succeeded":  # an error, and its lines are not counted as lost: it may not have run
            f.errors.append(f"job {jid} {job['state']}: {job.get('message')}")
            return
        if not job.get("has_build") or not (job.get("results") or {}).get("op_times"):
            f.errors.append(f"job {jid}: no build folder or no results stored ({job.get('has_build')}, {job.get('results')})")
        want = expected_lines(jid, self.o)
        lost, dup, runs = compare(stored, want)
        f.lost, f.duplicated, f.lines_checked = f.lost + lost, f.duplicated + dup, f.lines_checked + len(want)
        f.reruns += runs - 1
        if live is not None:
            lost, dup, _ = compare(live, want)
            f.live_lost, f.live_duplicated = f.live_lost + lost, f.live_duplicated + dup
        at = {p["name"]: datetime.fromisoformat(p["at"]) for p in job.get("phases", [])}
        created = datetime.fromisoformat(job["created_at"])
        if job.get("released_at"):
            f.released.append((datetime.fromisoformat(job["released_at"]) - created).total_seconds())
        if "claimed" in at:
            f.claimed.append((at["claimed"] - created).total_seconds())
            if job.get("finished_at"):
                f.ran.append((datetime.fromisoformat(job["finished_at"]) - at["claimed"]).total_seconds())

    async def log_lines(
        self, jid: str, auth: tuple[str, str], follow: bool, after: int = 0
    ) -> tuple[list[str], dict[str, Any] | None, int]:
        """The job's output lines from line ``after`` on, the job once the stream said it ended, and
        the number of the last line received (where a cut stream resumes)."""
        out: list[str] = []
        event, last = "message", after
        t0 = time.perf_counter()
        async with self.client.stream(
            "GET",
            f"/api/v1/jobs/{jid}/log",
            params={"follow": str(follow).lower()},
            auth=auth,
            headers={"Last-Event-ID": str(after)} if after else {},
            timeout=httpx.Timeout(60.0, read=120.0),
        ) as resp:
            if not follow:
                self.f.api_ms.append((time.perf_counter() - t0) * 1000)
            if resp.status_code != 200:
                raise httpx.HTTPStatusError(f"log: HTTP {resp.status_code}", request=resp.request, response=resp)
            async for raw in resp.aiter_lines():
                if raw.startswith("event:"):
                    event = raw[6:].strip()
                elif raw.startswith("data:") and event == "lines":
                    for b in logwire.loads(raw[5:]):
                        if b.n > last and b.s == "out":
                            out.extend(b.lines())
                        last = max(last, b.last)
                elif raw.startswith("data:") and event == "end":
                    return out, json.loads(raw[5:]), last
        return out, None, last

    async def follow(self, jid: str, auth: tuple[str, str]) -> tuple[list[str], dict[str, Any]]:
        """As ``raiclient submit`` follows: resumed with Last-Event-ID when the stream is cut."""
        lines: list[str] = []
        after = 0
        for _ in range(20):
            job = None
            with suppress(OSError, asyncio.IncompleteReadError, asyncio.TimeoutError):
                async for event, data in self.sse(f"/api/v1/jobs/{jid}/log", auth, after):
                    if event == "lines":
                        for b in logwire.loads(data):
                            if b.n > after and b.s == "out":
                                lines.extend(b.lines())
                            after = max(after, b.last)
                    elif event == "end":
                        job = json.loads(data)
                        break
            if job is not None:
                return lines, job
            self.f.reconnects += 1
            await asyncio.sleep(0.5)
        raise httpx.HTTPError(f"job {jid}: its log stream never ended")

    async def sse(self, path: str, auth: tuple[str, str], after: int) -> AsyncIterator[tuple[str, str]]:
        """(event, data) of a live log stream, read with asyncio's streams: httpx's per-chunk work
        cost the bench more CPU than the server spent sending (a student's client reads one stream;
        the bench reads hundreds on the same two cores)."""
        host, port = self.url.removeprefix("http://").rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
            resume = f"Last-Event-ID: {after}\r\n" if after else ""
            writer.write(
                f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Basic {token}\r\nAccept: text/event-stream\r\n"
                f"{resume}Connection: close\r\n\r\n".encode()
            )
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 60)
            if head.split(b" ", 2)[1] != b"200":
                raise httpx.HTTPError(f"log stream: {head[:200]!r}")
            chunked = b"transfer-encoding: chunked" in head.lower()
            buf = b""
            while True:
                if chunked:
                    size = int((await asyncio.wait_for(reader.readline(), 60)).split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        return
                    data = (await asyncio.wait_for(reader.readexactly(size + 2), 60))[:-2]
                else:
                    data = await asyncio.wait_for(reader.read(65536), 60)
                    if not data:
                        return
                buf = (buf + data).replace(b"\r\n", b"\n")
                while (cut := buf.find(b"\n\n")) >= 0:
                    block, buf = buf[:cut].decode(), buf[cut + 2 :]
                    event, payload = "message", ""
                    for line in block.split("\n"):
                        if line.startswith("event:"):
                            event = line[6:].strip()
                        elif line.startswith("data:"):
                            payload = line[5:].lstrip(" ")
                    if payload:
                        yield event, payload
        finally:
            writer.close()

    async def poll(self, jid: str, auth: tuple[str, str]) -> tuple[list[str], dict[str, Any]]:
        deadline = time.monotonic() + self.o.job_seconds + self.o.drain_seconds
        while time.monotonic() < deadline:
            await asyncio.sleep(2.0)
            r = await self.timed("GET", f"/api/v1/jobs/{jid}", auth)
            job = r.json()
            if job["state"] not in ("queued", "running"):
                return [], job
        raise httpx.HTTPError(f"job {jid}: not ended in time")

    async def probes(self, stop: asyncio.Event) -> None:
        """/healthz every 0.25 s (no account), and a student's look at the queue and history every second."""
        k = 0
        while not stop.is_set():
            t0 = time.perf_counter()
            with suppress(httpx.HTTPError):
                await self.client.get("/healthz")
                self.f.healthz_ms.append((time.perf_counter() - t0) * 1000)
            k += 1
            if k % 4 == 0:
                auth = self.keys[self.rng.randrange(len(self.keys))]
                with suppress(httpx.HTTPError):
                    await self.timed("GET", "/api/v1/queue", auth)
                    await self.timed("GET", "/api/v1/jobs", auth, params={"limit": 20})
            with suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.25)

    async def run(self) -> None:
        o = self.o
        stop = asyncio.Event()
        prober = asyncio.create_task(self.probes(stop))
        tasks = []
        t0 = time.monotonic()
        i = 0
        while (o.jobs == 0 or i < o.jobs) and (o.seconds == 0 or time.monotonic() - t0 < o.seconds):
            await asyncio.sleep(max(t0 + i / o.rate - time.monotonic(), 0))
            tasks.append(asyncio.create_task(self.one(i)))
            i += 1
        self.f.submitting = time.monotonic() - t0
        await asyncio.wait(tasks, timeout=o.job_seconds + o.drain_seconds)
        for t in tasks:
            t.cancel()
        left = sum(not t.done() or t.cancelled() for t in tasks)
        if left:
            self.f.errors.append(f"{left} job(s) not ended within {o.drain_seconds:g} s of the last submission")
        stop.set()
        await prober
        await self.client.aclose()


# -- the run ----------------------------------------------------------------------------------


class Sampler(threading.Thread):
    """Every second: the server's RSS and descriptors, the simulated hosts' RSS, each part's CPU."""

    def __init__(self, f: Figures, parts: dict[str, list[int]]):
        super().__init__(daemon=True)
        self.f, self.parts, self.stop = f, parts, threading.Event()
        self.t0 = time.monotonic()
        self.cpu0 = self.cpu()

    def cpu(self) -> dict[str, float]:
        """CPU seconds of each part: the server's and hosts' processes with their children, the bench
        alone (the service's processes are its children too), every PostgreSQL process of the machine."""
        out = {name: sum(_cpu(p) for pid in pids for p in (_tree(pid) if name != "bench" else [pid])) for name, pids in self.parts.items()}
        out["postgres"] = sum(_cpu(p) for p in _named(b"postgres"))
        return out

    def take(self) -> Sample:
        server = _tree(self.parts["server"][0])
        cpu = self.cpu()
        return Sample(
            time.monotonic() - self.t0,
            self.f.ended,
            sum(_status(p, "VmRSS:") for p in server),
            sum(_fds(p) for p in server),
            sum(_status(p, "VmRSS:") for pid in self.parts["hosts"] for p in _tree(pid)),
            {k: v - self.cpu0.get(k, 0.0) for k, v in cpu.items()},
        )

    def run(self) -> None:
        while not self.stop.wait(1.0):
            self.f.samples.append(self.take())


def service_env(o: Options, tmp: Path, redis_url: str, db_url: str, port: int, token: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAI_") and k != "DATABASE_URL"}
    return {
        **env,
        "DATABASE_URL": db_url,
        "RAI_DATA_DIR": str(tmp / "data"),
        "RAI_REDIS_URL": redis_url,
        "RAI_WORKER_TOKEN": token,
        "RAI_SERVER_URL": f"http://127.0.0.1:{port}",
        "RAI_DEFAULT_QUEUE": o.queue,
        "RAI_QUEUES": o.queue,
        "RAI_METRICS_PORT": "0",
        "RAI_LOGIN_FAILURES_PER_IP": "1000000",
        "RAI_GPUS": "none",
        "RAI_MAX_ACTIVE_JOBS": str(o.per_student),
        # the students' pace is the bench's rate (a small class may each submit more than 5 a minute)
        "RAI_SUBMISSIONS_PER_MINUTE": "1000000",
        "PYTHONUNBUFFERED": "1",
        **o.server_settings,
    }


def roster(url: str, admin: Path, n: int) -> list[tuple[str, str]]:
    """``n`` students, imported through the API as an instructor does; their keys."""
    from raiprotocol.profile import read_profile_file

    p = read_profile_file(admin)
    csv = "username,team\n" + "".join(f"s{i:04d},t{i // 4:03d}\n" for i in range(1, n + 1))
    r = httpx.post(
        f"{url}/api/v1/admin/roster", content=csv, headers={"Content-Type": "text/csv"}, auth=(p.access_key, p.secret_key), timeout=300
    )
    r.raise_for_status()
    return [(k["access_key"], k["secret_key"]) for k in r.json()["created"]]


def stop_all(parts: list[Any]) -> None:
    """The hosts at once (each a warm shutdown: its runs may end), then the server."""
    for p in parts[1:]:
        with suppress(ProcessLookupError):
            if p.running():
                os.killpg(p.pid, signal.SIGTERM)
    for p in reversed(parts):
        p.stop(wait=20)


def hosts_alive(url: str, admin: Path, want: int) -> bool:
    from raiprotocol.profile import read_profile_file

    p = read_profile_file(admin)
    try:
        r = httpx.get(f"{url}/api/v1/workers", auth=(p.access_key, p.secret_key), timeout=5)
        return r.status_code == 200 and sum(w["alive"] and w["name"].startswith("sim-") for w in r.json()) >= want
    except httpx.HTTPError:
        return False


def run(o: Options) -> Figures:
    """The whole run: Redis, PostgreSQL, the server, the hosts, the students; the figures."""
    from raiserver.ops import launch

    tmp = Path(tempfile.mkdtemp(prefix="rai-fleet-"))
    f = Figures()
    say = (lambda *_: None) if o.quiet else (lambda *a: print(*a, file=sys.stderr, flush=True))
    hosts = o.hosts or max(math.ceil(o.slots / 25), 1)
    parts: list[launch.Part] = []
    try:
        with ExitStack() as stack:
            redis_url, redis_pid = (o.redis_url, 0) if o.redis_url else stack.enter_context(private_redis())
            db_url = o.database_url or stack.enter_context(fresh_database())
            stack.callback(stop_all, parts)  # before Redis and the database go
            port, token = launch.free_port(), uuid.uuid4().hex
            env = service_env(o, tmp, redis_url, db_url, port, token)
            url = f"http://127.0.0.1:{port}"
            (tmp / "data").mkdir()
            admin = launch.add_user(env, "admin", "admin", url, tmp / "admin.profile")
            server = launch.start_server(env, "127.0.0.1", port, tmp / "server.log", processes=o.server_processes, timeout=120)
            parts.append(server)
            keys = roster(url, admin, o.students)
            body = project(tmp / "project", o)
            for h in range(hosts):
                k = o.slots // hosts + (1 if h < o.slots % hosts else 0)
                host_env = {**env, "RAI_WORKER_NAME": f"sim-h{h:02d}", "RAI_WORK_DIR": str(tmp / f"host{h}"), "RAI_SLOTS": str(k)}
                host_env["RAI_EXECUTOR"] = "sim"
                parts.append(
                    launch.Part(f"host{h}", [sys.executable, str(Path(__file__).resolve()), "host"], host_env, tmp / f"host{h}.log").start()
                )
            deadline = time.monotonic() + 90
            while not hosts_alive(url, admin, hosts):
                dead = [p for p in parts if not p.running()]
                if dead or time.monotonic() > deadline:
                    raise RuntimeError(f"the simulated hosts did not come up: {[(p.name, p.tail()) for p in dead or parts[1:2]]}")
                time.sleep(0.5)
            say(f"fleet: server {url} ({o.server_processes} process(es)), {hosts} hosts, {o.slots} slots, {len(keys)} students")
            pids = {
                "server": [server.pid or 0],
                "hosts": [p.pid or 0 for p in parts[1:]],
                "bench": [os.getpid()],
                "redis": [redis_pid] if redis_pid else [],
            }
            sampler = Sampler(f, pids)
            f.samples.append(sampler.take())
            sampler.start()
            t0 = time.monotonic()
            students = Students(url, keys, body, o, f)
            progress = threading.Thread(target=_progress, args=(f, students, sampler, say), daemon=True)
            progress.start()
            asyncio.run(students.run())
            f.took = time.monotonic() - t0
            time.sleep(3)  # what the server does after the last end (storing, releasing)
            sampler.stop.set()
            sampler.join()
            f.samples.append(sampler.take())
            if "Traceback" in server.tail(200_000):
                f.errors.append("the server's log holds a traceback: " + server.tail(200_000).split("Traceback", 1)[1][:800])
    finally:
        if not os.environ.get("RAI_FLEET_KEEP"):
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            say(f"kept {tmp}")
    return f


def _progress(f: Figures, students: Students, sampler: Sampler, say: Any) -> None:
    while not sampler.stop.wait(15):
        s = f.samples[-1] if f.samples else None
        say(
            f"  {s.t if s else 0:6.0f} s: submitted {f.submitted}, ended {f.ended}, active {students.active}, errors {len(f.errors)}, "
            f"lost {f.lost}, claimed p99 {pct(f.claimed[-2000:], 0.99):.2f} s, api p99 {pct(f.api_ms[-4000:], 0.99):.0f} ms, "
            f"healthz p99 {pct(f.healthz_ms[-400:], 0.99):.0f} ms, server RSS {s.rss / 2**20 if s else 0:.0f} MiB"
        )


def at_jobs(samples: list[Sample], done: int) -> Sample:
    """The first sample taken once ``done`` jobs had ended (the last one if none)."""
    return next((s for s in samples if s.done >= done), samples[-1])


def warm_jobs(ended: int) -> int:
    """Growth is measured after this many jobs: the first 100 (a third of a short run) fill the
    server's caches, pools and allocator arenas."""
    return 100 if ended >= 300 else max(ended // 3, 1)


def growth(f: Figures, warm: int) -> tuple[Sample, Sample, float, float]:
    """Server RSS and descriptors after the first ``warm`` jobs and at the end: (first, last, KiB a job, fds a job)."""
    first, last = at_jobs(f.samples, warm), f.samples[-1]
    jobs = max(last.done - first.done, 1)
    return first, last, (last.rss - first.rss) / 1024 / jobs, (last.fds - first.fds) / jobs


def report(o: Options, f: Figures) -> str:
    start, end = f.samples[0], f.samples[-1]
    warm = warm_jobs(f.ended)
    first, last, kib, fds = growth(f, warm)
    middle = at_jobs(f.samples, (first.done + last.done) // 2)
    cpu = end.cpu
    wall = max(end.t - start.t, 1e-9)
    lines = [
        f"fleet: {o.slots} slots on {o.hosts or max(math.ceil(o.slots / 25), 1)} simulated hosts, {o.server_processes} server process(es), "
        f"{o.rate:g} submissions/s"
        + (f" for {o.seconds:g} s" if o.seconds else "")
        + (f" (at most {o.jobs} jobs)" if o.jobs else "")
        + f", each job {o.lines_per_second} "
        f"lines/s for {o.job_seconds:g} s read every {o.batch_ms} ms, {o.follow:.0%} followed live, {o.students} students",
        f"submissions: {f.submitted} in {f.took:.0f} s ({f.submitted / max(f.submitting, 1e-9):.1f}/s achieved), "
        f"ended {f.ended}: {dict(f.states)}; {f.held} waited for their student's earlier job to end (the per-student cap of "
        f"{o.per_student}), p50 {pct(f.held_s, 0.5):.1f} s, max {max(f.held_s, default=0.0):.1f} s",
        f"errors: {len(f.errors)}" + "".join(f"\n  {e}" for e in f.errors[:8]),
        f"lines checked: {f.lines_checked}; stored log: lost {f.lost}, duplicated {f.duplicated}; "
        f"live streams: lost {f.live_lost}, duplicated {f.live_duplicated}, reconnects {f.reconnects}; "
        f"jobs run again {f.reruns}",
        f"submit->claimed: p50 {pct(f.claimed, 0.5):.3f} s, p99 {pct(f.claimed, 0.99):.3f} s, "
        f"max {max(f.claimed, default=float('nan')):.3f} s (target p99 < 1 s), of which submit->released p50 "
        f"{pct(f.released, 0.5):.3f} s, p99 {pct(f.released, 0.99):.3f} s; claimed->ended p50 {pct(f.ran, 0.5):.2f} s",
        f"API (submit, status, queue, history, stored log; {len(f.api_ms)} calls): p50 {pct(f.api_ms, 0.5):.0f} ms, "
        f"p99 {pct(f.api_ms, 0.99):.0f} ms (target < 300); "
        f"submit alone p50 {pct(f.submit_ms, 0.5):.0f} ms, p99 {pct(f.submit_ms, 0.99):.0f} ms",
        f"/healthz ({len(f.healthz_ms)}): p50 {pct(f.healthz_ms, 0.5):.1f} ms, p99 {pct(f.healthz_ms, 0.99):.1f} ms (target < 100)",
        "server RSS / descriptors: "
        + ", ".join(
            f"{name} {s.rss / 2**20:.0f} MiB / {s.fds} ({s.done} jobs)"
            for name, s in (("start", start), (f"after {warm}", first), ("middle", middle), ("end", last))
        ),
        f"per job after the first {first.done}: RSS {kib:+.2f} KiB, descriptors {fds:+.4f} ({first.done} -> {last.done} jobs); "
        f"simulated hosts' RSS {first.hosts_rss / 2**20:.0f} -> {last.hosts_rss / 2**20:.0f} MiB",
        "CPU over the run (share of one core): " + ", ".join(f"{k} {v / wall:.2f}" for k, v in sorted(cpu.items(), key=lambda kv: -kv[1])),
    ]
    return "\n".join(lines)


def summary(o: Options, f: Figures) -> dict[str, Any]:
    """The figures a test asserts on."""
    warm = warm_jobs(f.ended)
    first, last, kib, fds = growth(f, warm)
    return {
        "submitted": f.submitted,
        "ended": f.ended,
        "held": f.held,
        "errors": f.errors,
        "lost": f.lost + f.live_lost,
        "duplicated": f.duplicated + f.live_duplicated,
        "lines_checked": f.lines_checked,
        "reruns": f.reruns,
        "claimed_p99": pct(f.claimed, 0.99),
        "api_p99_ms": pct(f.api_ms, 0.99),
        "healthz_p99_ms": pct(f.healthz_ms, 0.99),
        "rss_kib_per_job": kib,
        "fds_per_job": fds,
        "rss_first_mib": first.rss / 2**20,
        "rss_last_mib": last.rss / 2**20,
        "jobs_measured": last.done - first.done,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--slots", type=int, default=20, help="simulated worker slots in all")
    ap.add_argument("--hosts", type=int, default=0, help="simulated GPU hosts they are spread over (default: one per 25 slots)")
    ap.add_argument("--rate", type=float, default=2.0, help="submissions a second")
    ap.add_argument("--seconds", type=float, help="submit for this long (default 60 s, or until --jobs)")
    ap.add_argument("--jobs", type=int, default=0, help="stop after this many submissions (0: no limit)")
    ap.add_argument("--lines-per-second", type=int, default=100, help="lines each job prints a second")
    ap.add_argument("--job-seconds", type=float, default=5.0, help="how long each job prints")
    ap.add_argument("--batch-ms", type=int, default=100, help="the worker reads a job's output this often (lines a Redis batch)")
    ap.add_argument("--server-processes", type=int, default=1)
    ap.add_argument("--students", type=int, default=400)
    ap.add_argument("--per-student", type=int, default=2, help="jobs a student has unfinished at once (the server's cap)")
    ap.add_argument("--follow", type=float, default=1.0, help="share of students who watch their job live (SSE)")
    ap.add_argument("--redis-url", help="a Redis to use (default: a private redis-server)")
    ap.add_argument("--database-url", help="a PostgreSQL database to use (default: a fresh one, dropped afterwards)")
    ap.add_argument("--out", type=Path, help="also append the figures to this file")
    ap.add_argument("--set", action="append", default=[], metavar="RAI_NAME=VALUE", help="a server setting (repeatable)")
    a = ap.parse_args(argv)
    o = Options(
        slots=a.slots,
        hosts=a.hosts,
        rate=a.rate,
        seconds=a.seconds if a.seconds is not None else (0.0 if a.jobs else 60.0),
        jobs=a.jobs,
        lines_per_second=a.lines_per_second,
        job_seconds=a.job_seconds,
        batch_ms=a.batch_ms,
        server_processes=a.server_processes,
        students=a.students,
        per_student=a.per_student,
        follow=a.follow,
        redis_url=a.redis_url,
        database_url=a.database_url,
        server_settings=dict(kv.split("=", 1) for kv in a.set),
    )
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stopped: the server, hosts, Redis and database go too
    f = run(o)
    text = report(o, f)
    print(text, flush=True)
    if a.out:
        with a.out.open("a") as fh:
            fh.write(f"$ {' '.join(['bench/fleet_sim.py', *(argv if argv is not None else sys.argv[1:])])}\n{text}\n\n")
    return summary(o, f)


if __name__ == "__main__":
    if sys.argv[1:2] == ["host"]:
        host_main()
    else:
        main()
