"""One job's results as the worker reports them, for the tests that read results back (the
server's store.summaries and the client's results view): one sample, so both sides are checked
against the same fields."""

from __future__ import annotations

from raiprotocol.models import JobResultSummary, KernelTime, Measured

MEASURED = Measured(
    course_version=3,
    measure="op",
    op_time=0.0123,
    runs=[0.0122, 0.0123, 0.0125],
    spread=0.0003,
    accuracy=1.0,
    error=1e-6,
    flags=["slow start"],
    problem=None,
    ci=0.0001,
    kernels=[KernelTime(name="conv", ms=1.5)],
    verdict="Ranked #1 of 1",
)
PRINTED = JobResultSummary(
    op_times=[0.01, 0.002], op_time_total=0.012, op_time_runs=[0.012, 0.013], op_time_spread=0.001, correctness={"a": 0.9, "b": 0.8}
)
