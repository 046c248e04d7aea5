"""What a student sees of the term (issue 36): the kinds, when each is due for them, and the limits
they have left (``raiclient kinds``, ``raiclient limits``, and staff's ``admin kinds show``). The
server's answers as JSON objects (raiprotocol's KindOut and Limits), on the standard library."""

from __future__ import annotations

import sys
import textwrap
from typing import Any

from . import table
from .output import cell
from .session import when

Row = dict[str, Any]


def _when(t: str | None) -> str:
    return f"{when(t):%Y-%m-%d %H:%M} UTC" if t else ""


def late_policy(k: Row) -> str:
    """The late policy in words."""
    window = f" for {k['late_hours']:g} h" if k.get("late_hours") else ""
    policy = str(k.get("late_policy", "refuse"))
    return {"refuse": "not accepted", "mark": f"accepted, marked late{window}", "days": f"with late days{window}"}.get(policy, policy)


def print_kinds(kinds: list[Row], staff: bool) -> None:
    """A row per kind under a header: its state now, then its dates and late policy, each cell
    wrapped between words within the terminal's width (issue 49: no header, and words cut at 60
    columns)."""
    rows = []
    for k in kinds:
        due = k.get("due_at") if staff else k.get("your_due_at")
        parts = [f"opens {_when(k['opens_at'])}"] if k.get("opens_at") else []
        if due:
            later = k.get("your_due_at") and k.get("due_at") and when(k["your_due_at"]) > when(k["due_at"])
            extended = " (extended)" if not staff and later else ""
            parts.append(f"due {_when(due)}{extended}, late: {late_policy(k)}")
        else:
            parts.append("no deadline")
        if staff and k.get("extensions"):
            parts.append(f"{k['extensions']} extension(s)")
        rows.append((cell(k["name"]), cell(k.get("status", "")), "; ".join(parts)))
    sys.stdout.write(table.render(("kind", "now", "dates and late policy"), rows))
    sys.stdout.flush()


def wrapped(text: str, indent: int = 2) -> str:
    """A line of text wrapped between words at the terminal's width, its continuation indented."""
    return "\n".join(textwrap.wrap(text, table.width(), subsequent_indent=" " * indent, break_on_hyphens=False) or [""]) + "\n"


def limit_lines(lim: Row) -> list[str]:
    """One line per limit: used, and what is left."""
    if lim.get("exempt"):
        return ["Staff: no submission limit applies to you"]

    def left(used: float, cap: float, what: str, unit: str = "") -> str:
        if cap <= 0:
            return f"{what}: {used:g}{unit} (no limit)"
        return f"{what}: {max(cap - used, 0):g}{unit} left of {cap:g}{unit}"

    g = lim.get
    lines = [
        left(g("jobs_active", 0), g("max_active_jobs", 0), "Jobs waiting or running") + f" ({g('jobs_active', 0)} now)",
        left(g("submissions_last_minute", 0), g("submissions_per_minute", 0), "Submissions this minute"),
        left(g("submissions_last_day", 0), g("submissions_per_day", 0), "Submissions in 24 h"),
        left(g("gpu_minutes_used", 0.0), g("gpu_minutes_per_day", 0.0), "GPU minutes in 24 h"),
    ]
    if g("late_days") or g("late_days_used"):
        lines.append(f"Late days: {max(g('late_days', 0) - g('late_days_used', 0), 0)} left of {g('late_days', 0)}")
    return lines


def print_limits(lim: Row) -> None:
    sys.stdout.write("".join(wrapped(line) for line in limit_lines(lim)))
    sys.stdout.flush()
