"""Hands jobs to Celery by task name, on the queue the job names; the server imports no worker code."""

from __future__ import annotations

import json
from collections.abc import Callable

import redis
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

    def send(self, job_id: str, attempt: int, queue: str, exclusive: bool = False) -> None:
        """``exclusive``: the job runs alone on its host; the worker gives it its reserved pool
        process, not one of its slots (issue 32). Workers before it took two arguments: upgrade them first."""
        kwargs = {"exclusive": True} if exclusive else {}
        self.celery.send_task(TASK_NAME, args=[job_id, attempt], kwargs=kwargs, queue=queue, task_id=f"{job_id}.{attempt}")

    def forget_stale(self, r: redis.Redis, stale: Callable[[str, int], bool], older_than: float = 60.0) -> int:
        """Drop the unacknowledged deliveries Redis keeps for workers that died holding them
        (kombu's ``unacked`` hash and its index) once their job ended or moved to a later attempt:
        otherwise each stays until the visibility timeout (hours), and a soak's keys grow with
        every killed worker. ``stale(job_id, attempt)`` says which. Returns how many."""
        import time

        cutoff = time.time() - older_than
        old = [t.decode() if isinstance(t, bytes) else t for t in r.zrange(UNACKED_INDEX, 0, cutoff, byscore=True)]
        gone = 0
        for tag in old:
            raw = r.hget(UNACKED, tag)
            task_id = ""
            try:
                message = json.loads(raw)[0] if raw else {}
                task_id = str((message.get("headers") or {}).get("id") or "")
            except (ValueError, TypeError, AttributeError, IndexError):
                pass
            job_id, _, attempt = task_id.rpartition(".")
            if raw is None or (attempt.isdigit() and stale(job_id, int(attempt))):
                r.pipeline().zrem(UNACKED_INDEX, tag).hdel(UNACKED, tag).execute()
                gone += 1
        return gone


UNACKED, UNACKED_INDEX = "unacked", "unacked_index"  # kombu's Redis transport's names
