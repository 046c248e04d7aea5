"""Redis key names that the server and the worker must agree on (one definition for both)."""

from __future__ import annotations


LOG_PREFIX = "rai:log:"


def stream_key(job_id: str) -> str:
    """The job's live log: a Redis Stream of line batches (``raiclient.logwire``)."""
    return f"{LOG_PREFIX}{job_id}"


def job_of_stream(key: str) -> str:
    """The inverse of ``stream_key``."""
    return key.removeprefix(LOG_PREFIX)


def cancel_key(job_id: str) -> str:
    """Set by the server when a running job is cancelled; the worker watches it."""
    return f"rai:cancel:{job_id}"


IMAGE_PULLS = "rai:image-pulls"
"""A hash: image -> ``PullRequest`` JSON, the images staff asked every worker to hold."""
