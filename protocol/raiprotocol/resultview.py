"""What a job's results say, the same on the terminal and on the job page (issue 47): its results as
the server sends them (``raiprotocol.models.JobResultSummary`` as JSON) read typed, on the standard
library (``raiclient.pyz`` imports no pydantic), and the figures the program printed as facts,
each a label, a value and a note, which the client prints as a table and the job page as a list.

A new result metric is its field in ``JobResultSummary``, its pattern in the server's
``grading/results.py``, and here its name in ``ResultsView`` and its fact in ``printed_facts``;
tests/unit/test_client_results.py checks every name here against the wire model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple, TypeVar


class MeasuredView(NamedTuple):
    """A ranked run's ``raiprotocol.models.Measured``: the wire model's names, typed (no
    dataclasses either: 15 ms of the client's start)."""

    course_version: int | None = None
    measure: str | None = None
    op_time: float | None = None
    runs: Sequence[float] = ()
    passes: int = 1
    spread: float | None = None
    accuracy: float | None = None
    error: float | None = None
    flags: Sequence[str] = ()
    problem: str | None = None


class ResultsView(NamedTuple):
    """A job's ``raiprotocol.models.JobResultSummary``, read from the server's JSON by ``results_view``."""

    op_times: Sequence[float] = ()
    op_time_total: float | None = None
    op_time_runs: Sequence[float] = ()
    op_time_spread: float | None = None
    correctness: Mapping[str, float] = MappingProxyType({})
    elapsed_seconds: float | None = None
    max_rss_kb: int | None = None
    measured: MeasuredView | None = None


View = TypeVar("View", ResultsView, MeasuredView)


def _view(cls: type[View], data: Mapping[str, Any]) -> View:
    """``cls`` from the fields of ``data`` it names (absent or null: the field's default)."""
    return cls(**{name: data[name] for name in cls._fields if data.get(name) is not None})


def results_view(results: Mapping[str, Any] | None) -> ResultsView:
    """A job's ``results`` as the server sent them (JSON), typed: the one place that reads them by key."""
    r = results or {}
    m = r.get("measured")
    return _view(ResultsView, {**r, "measured": _view(MeasuredView, m) if m else None})


class Fact(NamedTuple):
    """One line of a job's results: "Correctness", "0.91", "model ece408" (the note is said aside:
    in brackets on the terminal, greyed on the page)."""

    label: str
    value: str
    note: str = ""


def _n(x: float) -> str:
    """A figure as printed, to 10 significant digits: 123.456789 s and 0.99999996 stay whole (not 123.457 and 1)."""
    return f"{x:.10g}"


def printed_facts(r: ResultsView) -> list[Fact]:
    """The figures the program printed (Op Time, Correctness, GNU time's), in the order shown."""
    facts: list[Fact] = []
    if r.op_times:
        total = r.op_time_total
        end = f" = {_n(total)} s" if len(r.op_times) > 1 and total is not None else " s"
        facts.append(Fact("Op Time", " + ".join(_n(t) for t in r.op_times) + end))
    if r.op_time_runs:
        runs = ", ".join(_n(t) for t in r.op_time_runs)
        facts.append(Fact("Timing runs", f"{len(r.op_time_runs)}: {runs} s", f"median shown, spread {_n(r.op_time_spread or 0)} s"))
    for model, value in r.correctness.items():
        facts.append(Fact("Correctness", _n(value), f"model {model}"))
    if r.elapsed_seconds is not None:
        facts.append(Fact("Elapsed", f"{_n(r.elapsed_seconds)} s"))
    if r.max_rss_kb is not None:
        facts.append(Fact("Peak memory", f"{r.max_rss_kb / 1024:,.0f} MiB"))
    return facts
