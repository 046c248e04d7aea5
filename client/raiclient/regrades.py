"""How regrade requests read in the terminal (issue 36): the student's ``raiclient regrades`` and
staff's ``raiclient admin regrades`` print the same lines, every text through ``cell``. The
server's RegradeOut as a JSON object, on the standard library."""

from __future__ import annotations

import sys
from typing import Any

from .output import cell
from .session import when


def outcome(r: dict[str, Any]) -> str:
    """What became of a request, in one sentence."""
    by = cell(r.get("closed_by") or "")
    if r["state"] == "open":
        return "open: waiting for staff to answer"
    if r.get("outcome") == "remeasured":
        return f"re-measured by {by} as job {r['remeasure_job']} (follow it: raiclient logs {r['remeasure_job']} --follow)"
    if r.get("outcome") == "adjusted":
        return f"grade adjusted to {cell(r.get('grade'))} by {by}: {cell(r.get('reason'))}"
    return f"answered by {by}"


def show(rows: list[dict[str, Any]], staff: bool = False) -> None:
    """A few lines per request: a table of long messages does not fit a terminal."""
    out = []
    for r in rows:
        who = f"{cell(r['student'])} on " if staff else ""
        out.append(
            f"#{r['id']} {who}job {r['job_id']} ('{cell(r['kind'])}'), asked {when(r['created_at']):%Y-%m-%d %H:%M} UTC: {outcome(r)}\n"
            f"  message: {cell(r['message'])}" + (f"\n  answer: {cell(r['answer'])}" if r.get("answer") else "")
        )
    sys.stdout.write("".join(line + "\n" for line in out))
    sys.stdout.flush()
