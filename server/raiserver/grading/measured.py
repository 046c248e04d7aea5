"""A ranked run's numbers as the service measured and checked them (issue 23).

The worker runs the course's timed command several times and reports, for each run, the
profiler's export of its report (read after every process of the job had ended, from a folder
only root in the container can write) or the wall time it took outside the container, and the
predictions file as it was when the run's processes were gone. Here they become the ranked op
time (the median run), the spread, and the accuracy against labels that never left the server.
What the program printed is kept beside them, never ranked; a disagreement is flagged for staff.

Everything here reads bytes a student's program influenced (kernel names, predictions): bounded,
linear, and run off the event loop (finish_job runs in the thread pool).
"""

from __future__ import annotations

import csv
import io
import math
import statistics

from raiprotocol.inputs import shuffled
from raiprotocol.models import KernelTime, Measured, MeasuredRun
from raiprotocol.spec import CourseSpec, Ranked
from raiserver.grading.course import labels_of

MAX_REPORT_BYTES = 1024 * 1024  # the CSV of one timed run; the worker cuts it there too
MAX_ROWS = 100_000
NAME_CHARS = 200
_UNIT_SECONDS = {"ns": 1e-9, "nsecond": 1e-9, "us": 1e-6, "usecond": 1e-6, "ms": 1e-3, "msecond": 1e-3, "s": 1.0, "second": 1.0}
DURATION = "gpu__time_duration.sum"


class ReportError(ValueError):
    """The profiler's export is not what ncu writes: the run cannot rank."""


def kernel_times(report: str) -> list[tuple[str, float]]:
    """(kernel name, seconds) for every profiled launch, from ``ncu --import R --csv --page raw
    --metrics gpu__time_duration.sum``: a header row, a units row, one row per launch."""
    rows = csv.reader(io.StringIO(report[:MAX_REPORT_BYTES]))
    header = next(rows, None)
    while header is not None and DURATION not in header:  # ncu may print notes before the table
        header = next(rows, None)
    if header is None or "Kernel Name" not in header:
        raise ReportError("the profiler's report has no kernel durations")
    name_at, duration_at = header.index("Kernel Name"), header.index(DURATION)
    units = next(rows, None)
    unit = units[duration_at].strip() if units and len(units) > duration_at else ""
    if unit not in _UNIT_SECONDS:
        raise ReportError(f"the profiler's report gives durations in an unknown unit {unit[:20]!r}")
    out = []
    for i, row in enumerate(rows):
        if i >= MAX_ROWS:
            raise ReportError(f"the profiler's report has more than {MAX_ROWS} kernel launches")
        if len(row) <= max(name_at, duration_at):
            continue
        try:
            value = float(row[duration_at].replace(",", ""))
        except ValueError:
            raise ReportError(f"a kernel's duration is not a number: {row[duration_at][:20]!r}") from None
        if not math.isfinite(value) or value < 0:
            raise ReportError("a kernel's duration is not a finite number")
        out.append((row[name_at][:NAME_CHARS], value * _UNIT_SECONDS[unit]))
    return out


def accuracy(predictions: str, labels: list[str]) -> float:
    """The fraction of labels the predictions match, line by line (surrounding blanks ignored);
    a missing line counts as wrong, extra lines are ignored."""
    answers = predictions.split("\n", len(labels))[: len(labels)]
    right = sum(1 for got, want in zip(answers, labels, strict=False) if got.strip() == want.strip())
    return right / len(labels)


class _Unranked(Exception):
    """Why a timed run leaves the whole ranked run without a number."""


def _ended_well(run: MeasuredRun, where: str) -> None:
    """A timed run that failed ranks nothing."""
    if run.problem:
        raise _Unranked(f"{where}: {run.problem}")
    if run.exit_code != 0:
        raise _Unranked(f"{where} exited with status {run.exit_code}")


def _within_cpu_budget(run: MeasuredRun, ranked: Ranked, where: str) -> None:
    """A timed run that spent more of the host's CPU than the course allows ranks nothing."""
    if ranked.cpu_seconds is not None:  # answers computed on the host's CPU do not rank (issue 32)
        if run.cpu_seconds is None:
            raise _Unranked(f"{where}: its CPU time could not be read")
        if run.cpu_seconds > ranked.cpu_seconds:
            raise _Unranked(f"{run.cpu_seconds:.3g} s of CPU time in {where} (the course allows {ranked.cpu_seconds:g} s)")


def _kernels_of(run: MeasuredRun, where: str) -> list[tuple[str, float]]:
    try:
        launches = kernel_times(run.report or "")
    except ReportError as exc:
        raise _Unranked(f"{where}: {exc}") from None
    if not launches:
        raise _Unranked(f"{where} launched no GPU kernel")
    return launches


def _accuracy(run: MeasuredRun, labels: list[str], seed: int | None) -> float:
    """The run's answers against the labels, in the secret order its seed chose (a seeded course)."""
    assert run.predictions is not None
    if labels and seed is not None:
        order = shuffled(len(labels), seed)
        return accuracy(run.predictions, [labels[j] for j in order])
    return accuracy(run.predictions, labels) if labels else 0.0


def summarize(
    runs: list[MeasuredRun] | None,
    spec: CourseSpec,
    version: int,
    labels_text: str,
    printed_op_time: float | None,
    seeds: list[int] | None = None,
) -> Measured:
    """``seeds``: each timed run's secret input order (a seeded course): its answers are checked
    against the labels in that order."""
    ranked = spec.ranked
    m = Measured(course_version=version, measure=ranked.measure, printed_op_time=printed_op_time)
    if not runs:
        m.problem = "the timed runs did not happen (the build did not succeed)"
        return m
    labels = labels_of(labels_text)
    totals: list[float] = []
    accuracies: list[float] = []
    kernels_per_run: list[list[tuple[str, float]]] = []
    try:
        for i, run in enumerate(runs, 1):
            where = f"timed run {i} of {len(runs)}"
            _ended_well(run, where)
            if run.cpu_seconds is not None:
                m.cpu_seconds.append(round(run.cpu_seconds, 3))
            if run.gpu:
                m.gpu.append(dict(run.gpu))
            _within_cpu_budget(run, ranked, where)
            if ranked.measure == "kernels":
                kernels_per_run.append(_kernels_of(run, where))
                totals.append(sum(t for _, t in kernels_per_run[-1]))
            else:
                totals.append(run.wall_seconds)
            if run.predictions is None:
                raise _Unranked(f"{where} left no {ranked.predictions} in /build (the file the course's program writes its answers to)")
            accuracies.append(_accuracy(run, labels, seeds[i - 1] if seeds is not None and i <= len(seeds) else None))
    except _Unranked as why:
        m.problem = str(why)
        return m
    median = statistics.median_low(totals)
    mean = statistics.fmean(totals)
    m.runs = [round(t, 9) for t in totals]
    m.op_time = round(median, 9)
    m.spread = round(max(totals) - min(totals), 9)
    m.cv = round(statistics.pstdev(totals) / mean, 6) if mean > 0 else None
    m.ci = round(half_width(totals), 9)
    m.accuracy = round(min(accuracies), 6)
    if kernels_per_run:
        m.kernels = _kernel_table(kernels_per_run[totals.index(median)])
    m.flags = _flags(m, ranked, printed_op_time, median, accuracies)
    return m


def _kernel_table(launches: list[tuple[str, float]]) -> list[KernelTime]:
    """The median run's kernels by name (arguments dropped), slowest first, in ms."""
    per_name: dict[str, float] = {}
    for name, seconds in launches:
        short = name.split("(", 1)[0].strip() or name
        per_name[short] = per_name.get(short, 0.0) + seconds * 1e3
    return [KernelTime(name=k, ms=round(v, 6)) for k, v in sorted(per_name.items(), key=lambda kv: -kv[1])]


def _flags(m: Measured, ranked: Ranked, printed_op_time: float | None, median: float, accuracies: list[float]) -> list[str]:
    """What staff should look at: a printed time far from the measured one, answers that changed,
    a GPU that slowed down, timed runs that varied."""
    flags = list(m.flags)
    if printed_op_time is not None and median > 0 and abs(printed_op_time - median) > ranked.tolerance * median:
        flags.append(f"the program printed an op time of {printed_op_time:.6g} s; the service measured {median:.6g} s")
    if max(accuracies) - min(accuracies) > 0:
        flags.append(f"the answers differed between timed runs (accuracy {min(accuracies):.4f} to {max(accuracies):.4f})")
    for i, state in enumerate(m.gpu, 1):
        slowed = sorted({*(state.get("before") or {}).get("throttle", []), *(state.get("after") or {}).get("throttle", [])})
        if slowed:
            flags.append(f"the GPU slowed down during timed run {i} ({', '.join(slowed)})")
    if m.cv is not None and m.cv > 0.05:
        flags.append(f"the timed runs varied by {m.cv:.1%} (coefficient of variation)")
    return flags


# Student's t at 97.5 % for n - 1 degrees of freedom (n = 2 … 20 timed runs): a 95 % interval
_T975 = [
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
]


def half_width(totals: list[float]) -> float:
    """Half the 95 % confidence interval of the timed runs' mean (0 for a single run): what the
    board shows beside each op time, and how it tells a tie from a lead."""
    n = len(totals)
    if n < 2:
        return 0.0
    return _T975[min(n - 2, len(_T975) - 1)] * statistics.stdev(totals) / math.sqrt(n)


def in_words(seconds: float) -> str:
    return f"{seconds * 1e3:.4g} ms" if seconds < 1 else f"{seconds:.4g} s"
