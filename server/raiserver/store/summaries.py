"""A job's results read back (issue 47): ``raiprotocol.models.JobResultSummary`` is stored as JSON
on the job's row (``Job.results``, written by ``jobs.lifecycle.finish_job``); the server reads it
back only through here, by attribute, never by key.

- ``summary_of(job)``: the whole summary, validated once per row object (about 20 µs): a job's
  page and its API answer, a board's best runs, a ranked run's verdict.
- ``figures_of(results)``: the few figures a run is judged by, read straight from the stored JSON
  (about 0.3 µs): a grade sheet judges every run of a kind, 30,000 at term scale, where validating
  each would take 0.6 s.
- ``path(...)``: a key path into the stored JSON, for the database to read a figure out of many rows
  (the leaderboard's candidates), checked against the model when the module is imported.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple, get_type_hints

from pydantic import BaseModel

from raiprotocol.models import JobResultSummary
from raiserver.store.tables import Job

_CACHE = "_rai_summary"  # on the row object: (the results it was read from, the summary)


def summary_of(job: Job) -> JobResultSummary | None:
    """The job's results, typed (None: none stored yet). Read again only when ``job.results`` is a
    new value (``finish_job`` sets it twice; an expired row loads it anew); don't change the summary
    returned, it is shared by every reader of this row object."""
    raw = job.results
    if not raw:
        return None
    kept = job.__dict__.get(_CACHE)
    if kept is not None and kept[0] is raw:
        summary: JobResultSummary = kept[1]
        return summary
    summary = JobResultSummary.model_validate(raw)
    job.__dict__[_CACHE] = (raw, summary)
    return summary


class Figures(NamedTuple):
    """What a run is judged by (grades, a regrade's facts): the service's measurement for a ranked
    run, what the program printed for any other."""

    op_time: float | None  # seconds: the measured total, else the printed one
    accuracy: float | None  # the service's check, else the lowest correctness printed
    measured: bool  # the service measured them (a ranked run)
    problem: str | None  # why the service's measurement cannot rank (measured runs only)


def figures_of(results: Mapping[str, Any] | None) -> Figures:
    """A stored ``JobResultSummary``'s figures, without validating the whole of it (the one place
    that reads them by key; tests/unit/test_summaries.py checks them against the model)."""
    r = results or {}
    m = r.get("measured")
    if m:
        return Figures(m.get("op_time"), m.get("accuracy"), True, m.get("problem"))
    printed = r.get("correctness") or {}
    return Figures(r.get("op_time_total"), min(printed.values()) if printed else None, False, None)


def path(*keys: str) -> tuple[str, ...]:
    """A path into a stored ``JobResultSummary`` (``path("measured", "op_time")``) for a JSON
    column expression; a name the model lacks fails here, at import, not as a silent NULL."""
    model: type[BaseModel] | None = JobResultSummary
    for key in keys:
        if model is None or key not in model.model_fields:
            raise KeyError(f"JobResultSummary has no {'.'.join(keys)}")
        annotation = get_type_hints(model)[key]  # Measured is defined after JobResultSummary: a forward reference
        model = next((a for a in getattr(annotation, "__args__", (annotation,)) if isinstance(a, type) and issubclass(a, BaseModel)), None)
    return keys
