"""What a student sees of the term (issue 36): the kinds, when each is due for them, and the limits
they have left (``raiclient kinds``, ``raiclient limits``)."""

from __future__ import annotations

from datetime import datetime

from rich.text import Text

from raiprotocol.models import KindOut, Limits

from .console import show
from .output import cell


def _when(t: datetime | None) -> str:
    return f"{t:%Y-%m-%d %H:%M} UTC" if t is not None else ""


def late_policy(k: KindOut) -> str:
    """The late policy in words."""
    window = f" for {k.late_hours:g} h" if k.late_hours else ""
    return {"refuse": "not accepted", "mark": f"accepted, marked late{window}", "days": f"with late days{window}"}.get(
        k.late_policy, k.late_policy
    )


def print_kinds(kinds: list[KindOut], staff: bool) -> None:
    """One line per kind (a table of five dates does not fit 80 columns): its state now, then its dates."""
    width = max((len(k.name) for k in kinds), default=4)
    state = max((len(k.status) for k in kinds), default=4)
    for k in kinds:
        due = k.due_at if staff else k.your_due_at
        parts = [f"opens {_when(k.opens_at)}"] if k.opens_at else []
        if due is not None:
            extended = " (extended)" if not staff and k.your_due_at and k.due_at and k.your_due_at > k.due_at else ""
            parts.append(f"due {_when(due)}{extended}, late: {late_policy(k)}")
        else:
            parts.append("no deadline")
        if staff and k.extensions:
            parts.append(f"{k.extensions} extension(s)")
        show(Text(f"{cell(k.name).ljust(width)}  {k.status.ljust(state)}  {'; '.join(parts)}"))


def limit_lines(lim: Limits) -> list[str]:
    """One line per limit: used, and what is left."""
    if lim.exempt:
        return ["Staff: no submission limit applies to you"]

    def left(used: float, cap: float, what: str, unit: str = "") -> str:
        if cap <= 0:
            return f"{what}: {used:g}{unit} (no limit)"
        return f"{what}: {max(cap - used, 0):g}{unit} left of {cap:g}{unit}"

    lines = [
        left(lim.jobs_active, lim.max_active_jobs, "Jobs waiting or running") + f" ({lim.jobs_active} now)",
        left(lim.submissions_last_minute, lim.submissions_per_minute, "Submissions this minute"),
        left(lim.submissions_last_day, lim.submissions_per_day, "Submissions in 24 h"),
        left(lim.gpu_minutes_used, lim.gpu_minutes_per_day, "GPU minutes in 24 h"),
    ]
    if lim.late_days or lim.late_days_used:
        lines.append(f"Late days: {max(lim.late_days - lim.late_days_used, 0)} left of {lim.late_days}")
    return lines


def print_limits(lim: Limits) -> None:
    for line in limit_lines(lim):
        show(Text(line))
