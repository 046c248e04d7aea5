"""The ``--json`` listings on the standard library: ``history``, ``status``, ``queue``, ``images``
and ``ranking`` with ``--json`` print the server's answer, which is the protocol's model
(raiprotocol.models: the server's response_model), without importing pydantic; so they run in
``raiclient.pyz`` on a bare Python, and start fast in scripts."""

from __future__ import annotations

import sys
from typing import NamedTuple

from raiprotocol.safejson import dumps
from raiprotocol.states import ExitCode, JobState, exit_code_for

from .errors import ApiError
from .output import error
from .transport import connect


class Listing(NamedTuple):
    command: str
    server: str | None = None
    limit: int | None = None
    job: str | None = None


def run(listing: Listing) -> int:
    """Print the listing as JSON; returns the exit status (``status``: the job's, as without --json)."""
    conn = connect(listing.server)
    if conn is None:
        return ExitCode.CLIENT_ERROR
    code: int = ExitCode.OK
    try:
        if listing.command == "history":
            data = conn.json("GET", "/api/v1/jobs", params={"limit": listing.limit or 20})["jobs"]
        elif listing.command == "status":
            from .session import last_job_id

            data = conn.json("GET", f"/api/v1/jobs/{listing.job or last_job_id(conn)}")
            state = JobState(data["state"])
            code = exit_code_for(state, data.get("exit_code")) if state.finished else ExitCode.OK
        elif listing.command == "ranking":
            data = conn.json("GET", "/api/v1/leaderboard", params={"n": listing.limit} if listing.limit else None)
        else:
            data = conn.json("GET", f"/api/v1/{'queue' if listing.command == 'queue' else 'images'}")
    except ApiError as exc:
        error(str(exc))
        return exc.code
    finally:
        conn.close()
    sys.stdout.write(dumps(data) + "\n")  # a job's text holds no control or bidi character raw
    sys.stdout.flush()
    return code
