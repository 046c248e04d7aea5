"""What a student sees of the term (issue 36): the kinds, when each is due for them, and the limits
they have left (``raiclient kinds``, ``raiclient limits``, and staff's ``admin kinds show``). The
server's answers as JSON objects (raiprotocol's KindOut and Limits), on the standard library."""

from __future__ import annotations

import sys
from typing import Any

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
    """One line per kind (a table of five dates does not fit 80 columns): its state now, then its dates."""
    width = max((len(cell(k["name"])) for k in kinds), default=4)
    state = max((len(k.get("status", "")) for k in kinds), default=4)
    lines = []
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
        lines.append(f"{cell(k['name']).ljust(width)}  {cell(k.get('status', '')).ljust(state)}  {'; '.join(parts)}")
    sys.stdout.write("".join(line + "\n" for line in lines))
    sys.stdout.flush()


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
    sys.stdout.write("".join(line + "\n" for line in limit_lines(lim)))
    sys.stdout.flush()
