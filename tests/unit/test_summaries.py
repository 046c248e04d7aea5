"""Issue 47: the server reads a job's stored results back typed, through raiserver.store.summaries;
what it reads by name is checked here against the model, so a renamed field fails a test instead
of reading None."""

from __future__ import annotations

import pytest
from helpers.results import MEASURED, PRINTED

from raiprotocol.models import JobResultSummary, Measured
from raiserver.store.summaries import Figures, figures_of, path, summary_of
from raiserver.store.tables import Job


def test_the_server_reads_a_jobs_results_typed_once_per_value():
    job = Job(results=None)
    assert summary_of(job) is None
    job.results = {}
    assert summary_of(job) is None
    job.results = PRINTED.model_dump()
    first = summary_of(job)
    assert first == PRINTED and summary_of(job) is first  # validated once
    job.results = {**PRINTED.model_dump(), "measured": MEASURED.model_dump()}  # finish_job sets it again
    again = summary_of(job)
    assert again is not first and again is not None and again.measured == MEASURED


@pytest.mark.parametrize(
    ("summary", "figures"),
    [
        (PRINTED, Figures(0.012, 0.8, False, None)),
        (JobResultSummary(op_time_total=0.5, measured=MEASURED), Figures(0.0123, 1.0, True, None)),
        (
            JobResultSummary(measured=Measured(course_version=1, measure="op", problem="no measurement")),
            Figures(None, None, True, "no measurement"),
        ),
        (JobResultSummary(), Figures(None, None, False, None)),
    ],
)
def test_the_fast_figures_agree_with_the_typed_summary(summary, figures):
    stored = summary.model_dump()
    assert figures_of(stored) == figures
    m = summary.measured
    typed = (
        Figures(m.op_time, m.accuracy, True, m.problem)
        if m
        else Figures(summary.op_time_total, min(summary.correctness.values()) if summary.correctness else None, False, None)
    )
    assert typed == figures
    assert figures_of(None) == figures_of({}) == Figures(None, None, False, None)


def test_a_path_into_the_results_names_fields_of_the_model():
    assert path("measured", "op_time") == ("measured", "op_time")
    assert path("correctness") == ("correctness",)
    for wrong in (("measured", "optime"), ("op_time_total", "x"), ("nope",)):
        with pytest.raises(KeyError):
            path(*wrong)
