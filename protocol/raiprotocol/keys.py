"""Names the server and the worker must agree on, one definition for both: Redis keys (each with
its inverse where one is needed) and the Celery task the server sends and the worker runs."""

from __future__ import annotations

LOG_PREFIX = "rai:log:"


def stream_key(job_id: str) -> str:
    """The job's live log: a Redis Stream of line batches (``raiprotocol.logwire``)."""
    return f"{LOG_PREFIX}{job_id}"


def job_of_stream(key: str) -> str:
    """The inverse of ``stream_key``."""
    return key.removeprefix(LOG_PREFIX)


def cancel_key(job_id: str) -> str:
    """Set by the server when a running job is cancelled; the worker watches it."""
    return f"rai:cancel:{job_id}"


def fence_key(job_id: str) -> str:
    """Which attempt of the job may write (its number), or ``end`` once the job ended: every log
    append of a run checks it atomically (``logwire.APPEND_LUA``), so a superseded run's lines are
    refused. Only ever raised (``logwire.FENCE_LUA``), so a late or repeated setter cannot lower it."""
    return f"rai:fence:{job_id}"


def lease_key(job_id: str) -> str:
    """Present while the run holding the job renewed its lease through Redis lately (a TTL): the
    server takes a run for lost only when neither this nor its HTTP renewals are fresh."""
    return f"rai:lease:{job_id}"


IMAGE_PULLS = "rai:image-pulls"
"""A hash: image -> ``PullRequest`` JSON, the images staff asked every worker to hold."""


TASK_NAME = "rai.run_job"
"""The Celery task: args (job_id, attempt); the server sends it on release, the worker registers it."""
