"""The Celery side: the task the server sends by name, and the heartbeat of this worker.

Late acks, one message prefetched per process and rejection on a lost process mean that a job
whose worker dies is delivered again instead of vanishing; the server's claim protocol makes
sure a second delivery never runs a job twice.
"""

from __future__ import annotations

import logging
import threading

from celery import Celery
from celery.signals import worker_ready, worker_shutdown

from raiprotocol.keys import TASK_NAME
from raiprotocol.models import Heartbeat

from . import __version__
from .config import WorkerSettings
from .gpus import discover
from .images import Puller, held_images
from .metrics import serve
from .runner import run_job, running_dir
from .server import ServerClient

log = logging.getLogger("raiworker")

settings = WorkerSettings.load()
GPUS = discover(settings.gpus)
SLOTS = settings.slots or max(len(GPUS), 1)

app = Celery("raiworker", broker=settings.redis_url)
app.conf.update(
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    worker_concurrency=SLOTS,
    broker_transport_options={"visibility_timeout": settings.visibility_timeout},
    broker_connection_retry_on_startup=True,
    task_serializer="json",
    accept_content=["json"],
    worker_hijack_root_logger=False,
    worker_send_task_events=False,
    task_ignore_result=True,
)


@app.task(name=TASK_NAME, bind=True, max_retries=None)
def run_job_task(self, job_id: str, attempt: int) -> str:
    try:
        return run_job(settings, GPUS, job_id, attempt)
    except ConnectionError as exc:  # server unreachable before the claim: try again later
        raise self.retry(exc=exc, countdown=10)


class _Heartbeat(threading.Thread):
    """Tells the server this worker lives, what it runs and which images it holds; carries out the
    image pulls staff asked for; serves this worker's /metrics."""

    def __init__(self) -> None:
        super().__init__(name="rai-heartbeat", daemon=True)
        self.stop = threading.Event()
        self.client = ServerClient(settings)
        self.docker = None
        self.puller: Puller | None = None
        self.images: list[str] | None = None
        self.busy = 0
        self.failures = 0
        if settings.executor == "docker":
            from .executors.docker import docker_client

            self.docker = docker_client()
            self.puller = Puller(self.docker, self.client, settings.work_dir / "image-pulls")
        if settings.metrics_port:
            try:
                serve(settings.metrics_addr, settings.metrics_port, settings.metrics_token, self.gauges)
            except (OSError, ValueError) as exc:  # a second worker on the host, a bad address: no metrics, still work
                log.error("worker /metrics not served on %s:%s: %s", settings.metrics_addr, settings.metrics_port, exc)

    def gauges(self) -> dict[str, float]:
        return {"slots": SLOTS, "busy_slots": self.busy, "gpus": len(GPUS), "heartbeat_failures": self.failures,
                "images": len(self.images or []), "image_pulls": sum(v == "pulling" for v in self.pulls().values())}

    def pulls(self) -> dict[str, str]:
        return dict(self.puller.status) if self.puller else {}

    def beat(self) -> None:
        running = sorted(p.name for p in running_dir(settings).glob("*")) if running_dir(settings).exists() else []
        self.busy = len(running)
        if self.docker is not None:
            self.images = held_images(self.docker)
        reply = self.client.heartbeat(Heartbeat(
            name=settings.worker_name, queues=settings.queue_list, executor=settings.executor, slots=SLOTS,
            busy=len(running), gpus=GPUS, running=running, version=__version__, images=self.images, pulls=self.pulls(),
        ))
        if self.puller is not None and reply.pull:
            self.puller.want(reply.pull)

    def run(self) -> None:
        while True:
            try:
                self.beat()
            except Exception as exc:  # the server may be restarting; keep trying
                self.failures += 1
                log.warning("heartbeat failed: %s", exc)
            if self.stop.wait(settings.heartbeat_seconds):
                return


_heartbeat: _Heartbeat | None = None


@worker_ready.connect
def _start_heartbeat(**_) -> None:
    global _heartbeat
    _heartbeat = _Heartbeat()
    _heartbeat.start()


@worker_shutdown.connect
def _stop_heartbeat(**_) -> None:
    if _heartbeat is not None:
        _heartbeat.stop.set()
