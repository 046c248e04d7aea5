"""The Celery side: the task the server sends by name, and the heartbeat of this worker.

Importing this module does no work: ``configure(runtime)`` (from ``raiworker run``, before the
pool forks) gives the app its broker, concurrency and the ``WorkerRuntime`` its tasks use.

Late acks, one message prefetched per process and rejection on a lost process mean that a job
whose worker dies is delivered again instead of vanishing; the server's claim protocol makes
sure a second delivery never runs a job twice.
"""

from __future__ import annotations

import logging
import platform
import threading
import time

from celery import Celery, Task
from celery.signals import worker_ready, worker_shutdown, worker_shutting_down

from raiprotocol.keys import TASK_NAME
from raiprotocol.models import GpuInfo, Heartbeat

from . import __version__
from .errors import NoPlace, ServerUnreachable
from .executors import executor_class
from .gpu.holds import occupancy
from .images import Puller, offer_line, offered_images
from .lease import start_draining
from .metrics import serve
from .run.entry import run_job, running_dir
from .runtime import WorkerRuntime
from .server import ServerClient
from .workdir import locks_dir, pulls_dir

log = logging.getLogger("raiworker")

_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64", "ppc64le": "ppc64le"}


def job_arch() -> str:
    """This host's CPU architecture, in the build file's words."""
    machine = platform.machine().lower()
    return _ARCH.get(machine, machine)


app = Celery("raiworker")
NO_PLACE_RETRY_SECONDS = 2
_runtime: WorkerRuntime | None = None


def configure(rt: WorkerRuntime) -> Celery:
    global _runtime
    _runtime = rt
    app.conf.update(
        broker_url=rt.settings.redis_url,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        worker_concurrency=rt.processes,
        broker_transport_options={"visibility_timeout": rt.settings.visibility_timeout},
        broker_connection_retry_on_startup=True,
        task_serializer="json",
        accept_content=["json"],
        worker_hijack_root_logger=False,
        worker_send_task_events=False,
        task_ignore_result=True,
    )
    return app


def runtime() -> WorkerRuntime:
    if _runtime is None:
        raise RuntimeError("raiworker.celery_app.configure() was not called")
    return _runtime


@app.task(name=TASK_NAME, bind=True, max_retries=None)
def run_job_task(self: Task, job_id: str, attempt: int, exclusive: bool = False) -> str:
    try:
        rt = runtime()
        return run_job(rt.settings, rt.gpus, job_id, attempt, rt.slots, exclusive)
    except ServerUnreachable as exc:  # server unreachable before the claim: try again later
        raise self.retry(exc=exc, countdown=10) from None
    except NoPlace:  # this host's places of its kind are held: nothing claimed; soon, on any host
        raise self.retry(countdown=NO_PLACE_RETRY_SECONDS) from None


class _Heartbeat(threading.Thread):
    """Tells the server this worker lives, what it runs and which images it holds; carries out the
    image pulls staff asked for; serves this worker's /metrics."""

    def __init__(self, rt: WorkerRuntime) -> None:
        super().__init__(name="rai-heartbeat", daemon=True)
        self.rt = rt
        settings = rt.settings
        self.stop = threading.Event()
        self.client = ServerClient(settings)
        self.docker = None
        self.puller: Puller | None = None
        self.images: list[str] | None = None
        self.busy = 0
        self.failures = 0
        self.failing_since: float | None = None  # when the heartbeats began to fail, while they do
        if settings.executor == "docker":
            from .executors.docker import shared_client

            self.docker = shared_client()
            self.puller = Puller(self.docker, self.client, pulls_dir(settings.work_dir), settings.work_dir)
        if settings.metrics_port:
            try:
                serve(settings.metrics_addr, settings.metrics_port, settings.metrics_token, self.gauges)
            except (OSError, ValueError) as exc:  # a second worker on the host, a bad address: no metrics, still work
                log.error("worker /metrics not served on %s:%s: %s", settings.metrics_addr, settings.metrics_port, exc)

    def gauges(self) -> dict[str, float]:
        return {
            "slots": self.rt.slots,
            "busy_slots": self.busy,
            "gpus": len(self.rt.gpus),
            "heartbeat_failures": self.failures,
            "images": len(self.images or []),
            "image_pulls": sum(v == "pulling" for v in self.pulls().values()),
        }

    def pulls(self) -> dict[str, str]:
        return dict(self.puller.status) if self.puller else {}

    def gpus_now(self) -> list[GpuInfo]:
        """The GPUs with the shares jobs hold on each now (the workers page, rai_gpu_jobs)."""
        settings = self.rt.settings
        used = occupancy(locks_dir(settings.work_dir), self.rt.gpus, settings.per_gpu)
        return [g.model_copy(update={"shares": settings.per_gpu, "jobs": used.get(g.index, 0)}) for g in self.rt.gpus]

    def beat(self) -> None:
        settings, rt = self.rt.settings, self.rt
        try:  # before the server is asked: one that does not answer must not hold this up
            executor_class(settings.executor).tidy_host(settings)
        except Exception as exc:  # noqa: BLE001 - the next beat tries again
            log.warning("tidying the host failed: %s", exc)
        running = sorted(p.name for p in running_dir(settings).glob("*")) if running_dir(settings).exists() else []
        self.busy = len(running)
        if self.docker is not None:
            self.images = offered_images(self.docker, settings)
        reply = self.client.heartbeat(
            Heartbeat(
                name=settings.worker_name,
                queues=settings.queues,
                executor=settings.executor,
                slots=rt.slots,
                busy=len(running),
                gpus=self.gpus_now(),
                running=running,
                version=__version__,
                images=self.images,
                pulls=self.pulls(),
                arch=job_arch(),
            )
        )
        if self.puller is not None and reply.pull:
            self.puller.want(reply.pull)

    def run(self) -> None:
        while True:
            try:
                self.beat()
            except Exception as exc:  # the server may be restarting (or, at a start, not up yet); keep trying
                self.failures += 1
                since = self.failing_since = self.failing_since or time.monotonic()
                failing = time.monotonic() - since
                quiet = failing < 2 * self.rt.settings.heartbeat_seconds  # a moment is no operator's concern
                log.log(logging.INFO if quiet else logging.WARNING, "heartbeat failed (for %.0f s): %s", failing, exc)
            else:
                self.failing_since = None
            if self.stop.wait(self.rt.settings.heartbeat_seconds):
                return


_heartbeat: _Heartbeat | None = None
_ready = False  # Celery said it is ready
_asked_to_stop = False  # a signal (SIGTERM, SIGINT, SIGQUIT) started its shutdown


def stopped_unasked() -> bool:
    """Celery ran (it was ready) and stopped without a signal asking it to: it gave up on an error."""
    return _ready and not _asked_to_stop


@worker_shutting_down.connect
def _asked(**_: object) -> None:
    """SIGTERM (an upgrade, `docker compose stop`): Celery takes no new job and waits for its runs;
    they may go on for RAI_DRAIN_SECONDS, then each hands its job back (lease.HANDED_BACK)."""
    global _asked_to_stop
    _asked_to_stop = True
    if _runtime is not None:
        s = _runtime.settings
        try:
            start_draining(s)
            running = len(list(running_dir(s).glob("*"))) if running_dir(s).exists() else 0
            log.warning("asked to stop: %d run(s) may go on for %g s (RAI_DRAIN_SECONDS); no new job is taken", running, s.drain_seconds)
        except OSError as exc:  # its runs go on until Celery's own end
            log.error("could not start draining: %s", exc)


@worker_ready.connect
def _start_heartbeat(**_: object) -> None:
    global _heartbeat, _ready
    _ready = True
    _heartbeat = _Heartbeat(runtime())
    s = runtime().settings
    if _heartbeat.docker is not None:
        try:
            log.info("worker %s %s", s.worker_name, offer_line(_heartbeat.docker, s))
        except Exception as exc:  # noqa: BLE001 - the engine may be slow to answer; the heartbeats say it too
            log.warning("worker %s: the images it offers could not be listed: %s", s.worker_name, exc)
    _heartbeat.start()


@worker_shutdown.connect
def _stop_heartbeat(**_: object) -> None:
    if _heartbeat is not None:
        _heartbeat.stop.set()
    s = runtime().settings
    executor_class(s.executor).host_stopping(s)
