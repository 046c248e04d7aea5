"""How the service's processes are started, watched and stopped: the one launcher that `raid dev`,
the benchmarks (through `raid dev`) and the test suite use, so the command lines, the readiness
checks and the stopping rules exist once.

Each process runs in a session of its own (stopping it stops its children, e.g. uvicorn's
workers) and appends to its own log file. A part started with ``die_with`` gets that signal
from the kernel when the process that started it dies, however it dies (PR_SET_PDEATHSIG):
`raid dev` killed with SIGKILL takes Redis, the server and the worker with it.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx


class Instance:
    """One `raid dev` per data folder: a lock held for its whole life (the kernel drops it when
    the process dies, however it dies) and a record of its parts' process groups. A start that
    finds the record of a run that died without stopping them (SIGKILL, a crash) stops those
    first: never a second Redis on one AOF folder, nor a second worker of the same name."""

    def __init__(self, data: Path):
        self.lock_path, self.record = data / "raid.lock", data / "raid.parts"
        self._fh: Any = None

    def acquire(self) -> list[str]:
        """Take the folder; returns what was stopped of an earlier run. SystemExit if a live
        `raid dev` holds it."""
        self._fh = self.lock_path.open("a+")
        try:
            fcntl.flock(self._fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._fh.seek(0)
            holder = self._fh.read().strip() or "?"
            raise SystemExit(
                f"raid: another `raid dev` (pid {holder}) runs on {self.lock_path.parent}; "
                "stop it first, or give this one its own --data-dir"
            ) from None
        self._fh.seek(0)
        self._fh.truncate()
        self._fh.write(str(os.getpid()))
        self._fh.flush()
        stopped = []
        for line in self.record.read_text().splitlines() if self.record.exists() else []:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if _started_at(int(entry.get("pid", 0))) == entry.get("started"):
                _stop_group(int(entry["pid"]))
                stopped.append(f"{entry.get('name')} (pid {entry['pid']})")
        self.record.write_text("")
        return stopped

    def remember(self, part: Part) -> None:
        with self.record.open("a") as fh:
            fh.write(json.dumps({"name": part.name, "pid": part.pid, "started": _started_at(part.pid or 0)}) + "\n")

    def release(self) -> None:
        if self._fh is not None:
            self.record.write_text("")
            self._fh.close()
            self._fh = None


def _started_at(pid: int) -> int | None:
    """When the process started (clock ticks since boot), None if it does not run: with its pid, it
    names the process for good (a pid is reused after a reboot; a command line is not reliable:
    Redis rewrites its own)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] == "Z" else int(fields[19])  # a zombie has ended: only its exit status is left


def _stop_group(pgid: int, wait: float = 5.0) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)


def port_taken(host: str, port: int) -> bool:
    """Whether something listens there already (a socket merely closing does not count)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_command(host: str, port: int, processes: int = 1) -> list[str]:
    return [sys.executable, "-m", "raiserver.ops.cli", "serve", "--host", host, "--port", str(port), "--workers", str(processes)]


def worker_command() -> list[str]:
    return [sys.executable, "-m", "raiworker.cli"]


PR_SET_PDEATHSIG = 1


def _die_with_parent(sig: int) -> Callable[[], None]:
    """A preexec_fn: the child gets ``sig`` when its parent dies. libc is loaded here, before the
    fork; a parent already gone by the time the child asks (the race) ends the child at once."""
    libc = ctypes.CDLL(None, use_errno=True)
    parent = os.getpid()

    def arm() -> None:
        if libc.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0) != 0 or os.getppid() != parent:
            os._exit(1)

    return arm


class Part:
    """One process of the service (Redis, the server, a worker), restartable after it stops;
    ``die_with``: the signal it gets when the process that started it dies (None: it lives on)."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], log: Path, die_with: int | None = None):
        self.name, self.args, self.env, self.log = name, args, env, log
        self.die_with = die_with
        self.proc: subprocess.Popen[bytes] | None = None
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
            self.proc = subprocess.Popen(
                self.args,
                env=self.env,
                stdout=fh,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent(self.die_with) if self.die_with else None,
            )
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

    def stop(self, sig: int = signal.SIGTERM, wait: float = 20.0, group: bool = True, give_up: Callable[[], bool] = lambda: False) -> bool:
        """Signal the part's whole session (SIGKILL: a box that dies), or with ``group`` False its
        main process only (a worker's warm shutdown: it finishes its jobs); SIGKILL the session if
        it lingers past ``wait`` or ``give_up()`` says so. Returns whether it stopped by itself."""
        if not self.running():
            return True
        assert self.proc is not None
        (os.killpg if group else os.kill)(self.proc.pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and not give_up():
            try:
                self.proc.wait(0.2)
                break
            except subprocess.TimeoutExpired:
                continue
        stopped = self.proc.poll() is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # what is left of its session: job processes, pool children
        self.proc.wait(5)
        return stopped

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


def start_server(
    env: dict[str, str],
    host: str,
    port: int,
    log: Path,
    processes: int = 1,
    timeout: float = 60.0,
    started: Callable[[Part], None] = lambda part: None,
    tied: bool = False,
) -> Part:
    """The API server, up once its /healthz answers (``started``: told as soon as it runs; ``tied``:
    it ends when its starter dies, with SIGTERM, so that uvicorn stops its own processes)."""
    part = Part("server", server_command(host, port, processes), env, log, die_with=signal.SIGTERM if tied else None).start()
    started(part)
    try:
        wait_until(answers(f"http://{host}:{port}/healthz"), part, "server", timeout)
    except BaseException:
        part.stop()
        raise
    return part


def start_worker(env: dict[str, str], name: str, work_dir: Path, log: Path, tied: bool = False) -> Part:
    """A worker; it is up once the server lists it alive (callers that can ask wait for that).
    ``tied``: it ends when its starter dies, with SIGTERM, Celery's warm shutdown, as when `raid dev`
    stops it: it takes no new job, lets those it runs finish, and ends."""
    return Part(
        "worker",
        worker_command(),
        {**env, "RAI_WORKER_NAME": name, "RAI_WORK_DIR": str(work_dir)},
        log,
        die_with=signal.SIGTERM if tied else None,
    ).start()


def jobs_running(work_dir: Path) -> int:
    """How many jobs the worker of this folder runs now: its markers, ``running/JOB`` (the worker's
    folder's layout, raiworker.workdir; the server and the worker share no code, only the folder)."""
    try:
        return sum(1 for _ in (work_dir / "running").iterdir())
    except OSError:  # no such folder yet: it never took a job
        return 0


def add_user(env: dict[str, str], name: str, role: str, server_url: str, profile: Path, team: str | None = None) -> Path:
    """A user with fresh keys, written to ``profile`` (``raiserver add-user``)."""
    args = [
        sys.executable,
        "-m",
        "raiserver.ops.cli",
        "add-user",
        name,
        "--role",
        role,
        "--server-url",
        server_url,
        "--profile",
        str(profile),
    ]
    if team:
        args += ["--team", team]
    out = subprocess.run(args, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"could not create the user {name}:\n{out.stderr}")
    return profile
