"""What every student command shares on the standard library: a connection whose failures end
the command with one sentence and the right exit status, the job a command names (your last one
when it names none, as ``logs`` always did), and the server's timestamps read back."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any

from raiprotocol.states import ExitCode

from .errors import ApiError
from .output import error
from .transport import Http, connect


class Failed(SystemExit):
    """The command ends here; what went wrong was said on stderr."""


@contextmanager
def session(server: str | None) -> Iterator[Http]:
    """A connection with the caller's profile; an ApiError ends the command with its line and code."""
    conn = connect(server)
    if conn is None:
        raise Failed(ExitCode.CLIENT_ERROR)
    try:
        yield conn
    except ApiError as exc:
        for line in str(exc).split("\n"):
            error(line)
        raise Failed(exc.code) from None
    finally:
        conn.close()


def fail(message: str, code: int = ExitCode.CLIENT_ERROR) -> None:
    error(message)
    raise Failed(code)


def last_job_id(conn: Http) -> str:
    """The caller's newest job; one line and exit status 2 when there is none yet."""
    last = conn.json("GET", "/api/v1/jobs", params={"limit": 1})["jobs"]
    if not last:
        fail("you have no job yet; submit one with: raiclient submit")
    return str(last[0]["id"])


def when(text: str) -> datetime:
    """A server timestamp (ISO 8601, UTC; Python 3.10 reads no trailing Z)."""
    at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return at if at.tzinfo is not None else at.replace(tzinfo=timezone.utc)


def duration(job: dict[str, Any]) -> float | None:
    if job.get("started_at") and job.get("finished_at"):
        return (when(job["finished_at"]) - when(job["started_at"])).total_seconds()
    return None
