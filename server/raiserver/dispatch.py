"""Hands jobs to Celery by task name, on the queue the job names; the server imports no worker code."""

from __future__ import annotations

from celery import Celery

from raiprotocol.keys import TASK_NAME


def make_celery(redis_url: str, visibility_timeout: int) -> Celery:
    app = Celery("raiserver", broker=redis_url, set_as_current=False)
    app.conf.update(
        broker_transport_options={"visibility_timeout": visibility_timeout},
        broker_connection_retry_on_startup=True,
        task_serializer="json",
        accept_content=["json"],
    )
    return app


class Dispatcher:
    def __init__(self, redis_url: str, visibility_timeout: int):
        self.celery = make_celery(redis_url, visibility_timeout)

    def send(self, job_id: str, attempt: int, queue: str) -> None:
        self.celery.send_task(TASK_NAME, args=[job_id, attempt], queue=queue, task_id=f"{job_id}.{attempt}")
