"""Redis key names that the server and the worker must agree on (one definition for both)."""

from __future__ import annotations


def stream_key(job_id: str) -> str:
    """The job's live log: a Redis Stream numbered 1, 2, 3… (ids ``0-*``)."""
    return f"rai:log:{job_id}"


def cancel_key(job_id: str) -> str:
    """Set by the server when a running job is cancelled; the worker watches it."""
    return f"rai:cancel:{job_id}"
