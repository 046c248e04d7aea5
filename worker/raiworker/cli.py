"""``raiworker``: start a worker for one or more queues, with the executor the operator chose."""

from __future__ import annotations

import logging
import os
import shutil

import typer

app = typer.Typer(add_completion=False, help="Run a rai GPU worker.", rich_markup_mode=None)


@app.command()
def run(
    loglevel: str = typer.Option("info", help="Celery log level"),
) -> None:
    """Start the worker (settings come from RAI_* environment variables)."""
    logging.basicConfig(level=loglevel.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from .config import WorkerSettings
    from .metrics import prepare
    from .runtime import WorkerRuntime

    try:
        settings = WorkerSettings.load()
    except ValueError as exc:  # pydantic's ValidationError: say which setting, and stop
        typer.echo(f"raiworker: bad settings: {exc}", err=True)
        raise typer.Exit(2)
    prepare(settings.work_dir)  # before the pool forks: job counters from every process
    rt = WorkerRuntime.start(settings)
    from .celery_app import configure

    celery = configure(rt)
    settings.work_dir.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(settings.work_dir / "slots", ignore_errors=True)  # the pool processes' folders of an earlier run
    if settings.executor == "docker":
        from .errors import ExecutorUnavailable
        from .executors.docker import docker_client, reap_containers

        try:
            client = docker_client()
        except ExecutorUnavailable as exc:
            typer.echo(f"raiworker: {exc}", err=True)
            raise typer.Exit(2)
        removed = reap_containers(client, settings.worker_name)
        if removed:
            typer.echo(f"raiworker: removed {removed} container(s) left by an earlier run")
        if rt.gpus:  # decided here, once: the pool processes inherit it
            from . import gpu_access

            typer.echo(f"raiworker: {gpu_access.current(settings, [g.index for g in rt.gpus], lambda: client.info().get('Runtimes')).line}")
    from .runner import recover

    lost = recover(settings)  # after the containers: a lost run must not go on beside its re-run
    if lost:
        typer.echo(f"raiworker: {len(lost)} job(s) of an earlier run were lost and go back in the queue: {', '.join(lost)}")
    from .terminal import pty_helper

    helper = pty_helper(settings.work_dir, settings.pty_helper)
    if helper is None:
        typer.echo("raiworker: warning: no pty helper (no C compiler?); job output will not be on a terminal", err=True)
    gpus = ", ".join(f"{g.index}:{g.name}" for g in rt.gpus) or "none"
    typer.echo(f"raiworker {settings.worker_name}: executor={settings.executor} queues={settings.queues} "
               f"slots={rt.slots} gpus={gpus} server={settings.server_url}")
    celery.worker_main([
        "worker", f"--loglevel={loglevel}", f"--queues={','.join(settings.queues)}",
        f"--concurrency={rt.slots}", f"--hostname={settings.worker_name}@%h", "--without-gossip", "--without-mingle",
        "--pool=prefork",
    ])


def main() -> None:
    os.environ.setdefault("FORKED_BY_MULTIPROCESSING", "1")
    app()


if __name__ == "__main__":
    main()
