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
    from .workdir import slots_dir

    shutil.rmtree(slots_dir(settings.work_dir), ignore_errors=True)  # the pool processes' folders of an earlier run
    from .errors import ExecutorUnavailable
    from .executors import executor_class

    try:
        for line in executor_class(settings.executor).prepare_host(settings, [g.index for g in rt.gpus]):
            typer.echo(f"raiworker: {line}")
    except ExecutorUnavailable as exc:
        typer.echo(f"raiworker: {exc}", err=True)
        raise typer.Exit(2)
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
