"""The ``--json`` listings on the standard library: ``history``, ``status``, ``queue``, ``images``
and ``ranking`` with ``--json`` print the server's answer, which is the protocol's model
(raiprotocol.models: the server's response_model), as the full command line would, without
importing pydantic; so they run in ``raiclient.pyz`` on a bare Python, and start fast in scripts.
Unusual spellings go to the full command line (``cli.py``), which prints the same."""

from __future__ import annotations

import sys
from typing import Any, NamedTuple

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


def listing_args(args: list[str]) -> Listing | None:
    """``history [-n N]``, ``status JOB``, ``queue``, ``images``, ``ranking [-n N]``, each with
    ``--json`` and optionally ``--server URL``; None for anything else."""
    if not args or args[0] not in ("history", "status", "queue", "images", "ranking") or "--json" not in args[1:]:
        return None
    command, rest = args[0], [a for a in args[1:] if a != "--json"]
    found: dict[str, Any] = {}
    while rest:
        head = rest.pop(0)
        if head in ("-n", "--server") and rest and not rest[0].startswith("-"):
            value = rest.pop(0)
            if head == "--server":
                found["server"] = value
            elif command in ("history", "ranking") and value.isdigit() and int(value) > 0:
                found["limit"] = int(value)
            else:
                return None
        elif command == "status" and "job" not in found and not head.startswith("-"):
            found["job"] = head
        else:
            return None
    if command == "status" and "job" not in found:
        return None
    return Listing(command, **found)


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
            data = conn.json("GET", f"/api/v1/jobs/{listing.job}")
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
