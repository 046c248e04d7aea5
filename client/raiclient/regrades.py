"""How regrade requests read in the terminal (issue 36): the student's ``raiclient regrades`` and
staff's ``raiclient admin regrades`` print the same lines, every text through ``cell``."""

from __future__ import annotations

from rich.text import Text

from raiprotocol.models import RegradeOut

from .console import show as print_out
from .output import cell


def outcome(r: RegradeOut) -> str:
    """What became of a request, in one sentence."""
    by = cell(r.closed_by or "")
    if r.state == "open":
        return "open: waiting for staff to answer"
    if r.outcome == "remeasured":
        return f"re-measured by {by} as job {r.remeasure_job} (follow it: raiclient logs {r.remeasure_job} --follow)"
    if r.outcome == "adjusted":
        return f"grade adjusted to {cell(r.grade)} by {by}: {cell(r.reason)}"
    return f"answered by {by}"


def show(rows: list[RegradeOut], staff: bool = False) -> None:
    """A few lines per request: a table of long messages does not fit a terminal."""
    for r in rows:
        who = f"{cell(r.student)} on " if staff else ""
        print_out(
            Text(
                f"#{r.id} {who}job {r.job_id} ('{cell(r.kind)}'), asked {r.created_at:%Y-%m-%d %H:%M} UTC: {outcome(r)}\n"
                f"  message: {cell(r.message)}" + (f"\n  answer: {cell(r.answer)}" if r.answer else "")
            ),
            soft_wrap=True,
        )
