"""``raiworker``: start a worker for one or more queues, with the executor the operator chose."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import warnings

import typer

from raiprotocol.settings import settings_problem

from .config import WorkerSettings
from .errors import ExecutorUnavailable
from .executors import check_name, executor_class
from .metrics import prepare
from .run.entry import recover
from .runtime import WorkerRuntime
from .terminal import pty_helper
from .workdir import drain_file, slots_dir, tmp_dir

# imported where used, for no cycle: Celery (only `raiworker run` needs it), the Docker SDK and the
# images (only the commands that talk to the engine), the Docker executor (only when it is the one chosen)

app = typer.Typer(add_completion=False, help="Run a rai GPU worker (with no command: run).", rich_markup_mode=None)


@app.callback(invoke_without_command=True)
def default(ctx: typer.Context, loglevel: str = typer.Option("info", help="Celery log level")) -> None:
    """`raiworker` alone runs the worker, as it always has (the compose file, `raid dev`)."""
    if ctx.invoked_subcommand is None:
        run(loglevel)


@app.command()
def run(
    loglevel: str = typer.Option("info", help="Celery log level"),
) -> None:
    """Start the worker (settings come from RAI_* environment variables)."""
    logging.basicConfig(level=loglevel.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # httpx logs every request at INFO: a line per heartbeat and lease renewal (every 3 s) drowned the
    # worker's own lines (issue 48); its warnings and errors still show
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))
    try:
        settings = WorkerSettings.load()
    except ValueError as exc:  # pydantic's ValidationError: say which setting, and stop
        typer.echo(f"raiworker: bad settings: {settings_problem(exc)}", err=True)
        raise typer.Exit(2) from None
    try:
        check_name(settings.executor)  # a mistyped RAI_EXECUTOR stops here, before any host is prepared
    except ExecutorUnavailable as exc:
        typer.echo(f"raiworker: bad settings: {exc}", err=True)
        raise typer.Exit(2) from None
    prepare(settings.work_dir)  # before the pool forks: job counters from every process
    rt = WorkerRuntime.start(settings)
    from celery.exceptions import SecurityWarning

    from .celery_app import configure

    celery = configure(rt)
    settings.work_dir.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(slots_dir(settings.work_dir), ignore_errors=True)  # the pool processes' folders of an earlier run
    drain_file(settings.work_dir).unlink(missing_ok=True)  # an earlier run's, asked to stop
    own_tmp = tmp_dir(settings.work_dir)  # before the pool: its processes make their folders there
    shutil.rmtree(own_tmp, ignore_errors=True)
    own_tmp.mkdir()
    os.environ["TMPDIR"] = str(own_tmp)
    tempfile.tempdir = None  # read again from TMPDIR
    try:
        for line in executor_class(settings.executor).prepare_host(settings, [g.index for g in rt.gpus]):
            typer.echo(f"raiworker: {line}")
    except ExecutorUnavailable as exc:
        typer.echo(f"raiworker: {exc}", err=True)
        raise typer.Exit(2) from None
    if settings.executor == "docker":  # before any job: what it offers is settled by id now
        from docker.errors import DockerException

        from .executors.docker import shared_client
        from .images import prepare_images

        try:
            for line in prepare_images(shared_client(), settings):
                typer.echo(f"raiworker: warning: {line}", err=True)
        except DockerException as exc:  # what it offers stays as recorded; the start-up line says it
            typer.echo(f"raiworker: warning: the images to offer could not be settled: {exc}", err=True)
    lost = recover(settings)  # after the containers: a lost run must not go on beside its re-run
    if lost:
        typer.echo(f"raiworker: {len(lost)} job(s) of an earlier run were lost and go back in the queue: {', '.join(lost)}")
    helper = pty_helper(settings.work_dir, settings.pty_helper)
    if helper is None:
        typer.echo("raiworker: warning: no pty helper (no C compiler?); job output will not be on a terminal", err=True)
    gpus = ", ".join(f"{g.index}:{g.name}" for g in rt.gpus) or "none"
    typer.echo(
        f"raiworker {settings.worker_name}: executor={settings.executor} queues={settings.queues} "
        f"slots={rt.slots} (+1 for ranked runs) gpus={gpus} server={settings.server_url}"
    )
    if os.geteuid() == 0:  # Celery's own warning says "absolutely not recommended" and to change --uid: not so here
        warnings.filterwarnings("ignore", category=SecurityWarning)
        typer.echo(
            "raiworker: runs as root: it drives the container engine and the timed runs' cgroups; "
            f"jobs run as {settings.container_user} in their containers, with no capability"
            if settings.executor == "docker"
            else "raiworker: runs as root (the process executor runs jobs as this user: prefer the docker executor)"
        )
    code: object = 0
    try:
        celery.worker_main(
            [
                "worker",
                f"--loglevel={loglevel}",
                f"--queues={','.join(settings.queues)}",
                f"--concurrency={rt.processes}",
                f"--hostname={settings.worker_name}@%h",
                "--without-gossip",
                "--without-mingle",
                "--pool=prefork",
            ]
        )
    except SystemExit as exc:
        code = exc.code
    _start_again_after_a_crash(code)
    raise typer.Exit(code if isinstance(code, int) else 1)


def _start_again_after_a_crash(code: object) -> None:
    """Celery stopped on its own, on an error, after it was ready and nobody asked it to stop: the
    worker starts again in place (same pid, as its supervisor knows it). Seen in the fault campaign:
    kombu's restore of unacknowledged messages after Redis went away met a closed connection
    ("'NoneType' object has no attribute 'hostname'") and Celery called it unrecoverable, leaving a
    host with no worker until someone restarted it. A worker that fails before it is ready (bad
    settings, no broker at all) still stops with its error."""
    from .celery_app import stopped_unasked

    if code in (0, None) or not stopped_unasked():
        return
    import sys
    import time

    typer.echo(f"raiworker: Celery stopped on an error (exit {code}) without being asked to; starting again", err=True)
    time.sleep(1)
    os.execv(sys.executable, [sys.executable, "-m", "raiworker.cli", *sys.argv[1:]])


def _images_settings() -> WorkerSettings:  # the work folder and RAI_WORKER_IMAGES, as `raiworker run` reads them
    try:
        return WorkerSettings.load()
    except ValueError as exc:
        typer.echo(f"raiworker: bad settings: {settings_problem(exc)}", err=True)
        raise typer.Exit(2) from None


@app.command()
def publish(
    images: list[str] = typer.Argument(..., help="image names (or ids) on this host"),
    withdraw: bool = typer.Option(False, "--withdraw", help="offer these images no more"),
) -> None:
    """Offer images on this host to jobs (the operator's word; recorded by image id in RAI_WORK_DIR,
    so an image built FROM one, or a later retag of its name, is not offered). A running worker
    sees the change at its next heartbeat."""
    import docker

    from .images import publish as publish_one
    from .images import withdraw as withdraw_one

    settings = _images_settings()
    client = docker.from_env(timeout=30)
    failed = False
    for ref in images:
        if withdraw:
            gone = withdraw_one(client, settings.work_dir, ref)
            typer.echo(
                f"withdrew {ref} ({', '.join(i.removeprefix('sha256:')[:12] for i in gone)})" if gone else f"{ref} was not published here"
            )
            continue
        try:
            image_id, names = publish_one(client, settings.work_dir, ref, "published by the operator (raiworker publish)")
        except docker.errors.ImageNotFound:
            typer.echo(f"raiworker: no image {ref} on this host", err=True)
            failed = True
            continue
        typer.echo(f"published {', '.join(names) or ref} (image {image_id.removeprefix('sha256:')[:12]}) on this worker")
    if failed:
        raise typer.Exit(1)


@app.command()
def published() -> None:
    """The images this worker offers to jobs, and why each."""
    import docker

    from .images import offer_line

    settings = _images_settings()
    typer.echo(offer_line(docker.from_env(timeout=30), settings))


@app.command("docker-check")
def docker_check() -> None:
    """Whether this host's Docker engine can run jobs: it answers, and rai/busybox is there (built
    from busybox-static when missing). One line; exit 1 when not (`raid dev` then uses the process
    executor)."""
    try:
        import docker

        from .images import ensure_busybox_image

        client = docker.from_env(timeout=10)
        client.ping()
    except Exception as exc:  # noqa: BLE001 - any failure means "no engine"
        typer.echo(f"no Docker engine answers ({exc.__class__.__name__})")
        raise typer.Exit(1) from None
    if not ensure_busybox_image(client):
        typer.echo("Docker answers but rai/busybox could not be built (apt-get install busybox-static)")
        raise typer.Exit(1)
    typer.echo("Docker engine found")


def main() -> None:
    os.environ.setdefault("FORKED_BY_MULTIPROCESSING", "1")
    app()


if __name__ == "__main__":
    main()
