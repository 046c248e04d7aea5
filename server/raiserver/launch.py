"""How the service's processes are started, watched and stopped: the one launcher that `raid dev`,
the benchmarks (through `raid dev`) and the test suite use, so the command lines, the readiness
checks and the stopping rules exist once.

Each process runs in a session of its own (stopping it stops its children, e.g. uvicorn's
workers) and appends to its own log file.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_command(host: str, port: int, processes: int = 1) -> list[str]:
    return [sys.executable, "-m", "uvicorn", "raiserver.asgi:app", "--host", host, "--port", str(port),
            "--workers", str(processes)]


def worker_command() -> list[str]:
    return [sys.executable, "-m", "raiworker.cli"]


class Part:
    """One process of the service (Redis, the server, a worker), restartable after it stops."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], log: Path):
        self.name, self.args, self.env, self.log = name, args, env, log
        self.proc: subprocess.Popen | None = None
        self.started = 0.0
        self.delay = 1.0
        self.restart_at: float | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> Part:
        with self.log.open("ab") as fh:
            self.proc = subprocess.Popen(self.args, env=self.env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
        self.started = time.monotonic()
        return self

    def check(self) -> str | None:
        """Supervision: restart the part if it stopped, after a growing pause; returns what to tell
        the user, if anything."""
        now = time.monotonic()
        if self.restart_at is not None:
            if now < self.restart_at:
                return None
            self.restart_at = None
            self.start()
            return f"{self.name} started again (log: {self.log})"
        if self.proc is None or self.proc.poll() is None:
            if now - self.started > 60:
                self.delay = 1.0  # up a minute: the next crash restarts quickly again
            return None
        code = self.proc.returncode
        self.restart_at = now + self.delay
        message = f"{self.name} stopped (exit {code}); starting it again in {self.delay:.0f} s; its log: {self.log}"
        self.delay = min(self.delay * 2, 30.0)
        return message

    def stop(self, sig: int = signal.SIGTERM, wait: float = 20.0) -> None:
        """Signal the part's whole session (SIGKILL: a box that dies); SIGKILL it if it lingers."""
        if not self.running():
            return
        assert self.proc is not None
        os.killpg(self.proc.pid, sig)
        try:
            self.proc.wait(wait)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)

    def tail(self, n: int = 2000) -> str:
        try:
            return self.log.read_text(errors="replace")[-n:]
        except OSError:
            return ""


def wait_until(ready: Callable[[], bool], part: Part, what: str, timeout: float = 60.0) -> None:
    """Wait for ``ready()``; fail at once, with the end of its log, if the part exits meanwhile."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not part.running():
            code = part.proc.returncode if part.proc else None
            raise RuntimeError(f"the {what} exited with {code}; the end of its log:\n{part.tail()}")
        if ready():
            return
        time.sleep(0.1)
    raise RuntimeError(f"the {what} was not ready within {timeout:.0f} s; the end of its log:\n{part.tail()}")


def answers(url: str) -> Callable[[], bool]:
    def ready() -> bool:
        try:
            return httpx.get(url, timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    return ready


def start_server(env: dict[str, str], host: str, port: int, log: Path, processes: int = 1, timeout: float = 60.0) -> Part:
    """The API server, up once its /healthz answers."""
    part = Part("server", server_command(host, port, processes), env, log).start()
    try:
        wait_until(answers(f"http://{host}:{port}/healthz"), part, "server", timeout)
    except BaseException:
        part.stop()
        raise
    return part


def start_worker(env: dict[str, str], name: str, work_dir: Path, log: Path) -> Part:
    """A worker; it is up once the server lists it alive (callers that can ask wait for that)."""
    return Part("worker", worker_command(), {**env, "RAI_WORKER_NAME": name, "RAI_WORK_DIR": str(work_dir)}, log).start()


def add_user(env: dict[str, str], name: str, role: str, server_url: str, profile: Path, team: str | None = None) -> Path:
    """A user with fresh keys, written to ``profile`` (``raiserver add-user``)."""
    args = [sys.executable, "-m", "raiserver.cli", "add-user", name, "--role", role, "--server-url", server_url,
            "--profile", str(profile)]
    if team:
        args += ["--team", team]
    out = subprocess.run(args, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"could not create the user {name}:\n{out.stderr}")
    return profile
