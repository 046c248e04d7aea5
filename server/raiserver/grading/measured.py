"""A ranked run's numbers as the service measured and checked them (issues 23, 46).

The worker runs, for each timed run, the course's reference and then the student's program under
rai-timed, on inputs drawn for that run from keys the job never sees. rai-timed holds the clock:
each operation's time runs from its begin mark (before which its inputs did not exist for the job)
to the moment every thread of the job was frozen after its end mark. Its outputs were fingerprinted
then and checked once the job was gone (raiserver.grading.opcheck). Here the runs become the ranked
op time (the median pass's total), the spread, the interval, and the verdict's reasons. What the
program printed is kept beside them, never ranked; a disagreement is flagged for staff.
"""

from __future__ import annotations

import math
import statistics

from raiprotocol.models import KernelTime, Measured, MeasuredRun, OpMeasure, gpu_slowdowns
from raiprotocol.spec import CourseSpec, Ranked
from raiserver.grading.floor import floor_seconds
from raiserver.grading.opcheck import Mismatch, compare

QUARANTINE = "quarantine: below the physics floor"  # staff's list of runs that beat physics
CPU_BUSY = 2.0  # CPU seconds per second of operation past which staff are told (the work may be on the CPU)
CPU_BUSY_FLAG = "the CPU was busy during the operations"
# the profiled run's kernels past this many times the measured operations' total: the program did
# GPU work under the profiler that its timed runs did not show (or ran kernels outside its operations)
KERNELS_PAST = 1.2


class _Unranked(Exception):
    """Why a timed run leaves the whole ranked run without a number."""


def _ended_well(run: MeasuredRun, where: str) -> None:
    """A timed run that failed ranks nothing; nor one whose reference could not run."""
    if run.problem:
        raise _Unranked(f"{where}: {run.problem}")
    if run.exit_code != 0:
        raise _Unranked(f"{where} exited with status {run.exit_code}")
    if run.reference_problem:
        raise _Unranked(f"{where}: {run.reference_problem}")


def _within_cpu_budget(run: MeasuredRun, ranked: Ranked, where: str) -> None:
    """A timed run that spent more of the host's CPU than the course allows ranks nothing (its
    cgroup's cpu.stat: every process and thread of the run, reaped or not)."""
    if ranked.cpu_seconds is not None:
        if run.cpu_seconds is None:
            raise _Unranked(f"{where}: its CPU time could not be read")
        if run.cpu_seconds > ranked.cpu_seconds:
            raise _Unranked(f"{run.cpu_seconds:.3g} s of CPU time in {where} (the course allows {ranked.cpu_seconds:g} s)")


def _checked_totals(run: MeasuredRun, ranked: Ranked, where: str) -> tuple[list[float], list[float], float]:
    """Each pass's total of its operations' times (a run does the course's operations
    ``run.passes`` times over), the reference's, and the outputs' largest error."""
    if not run.ops:
        raise _Unranked(f"{where} timed no operation (the course's harness marks each one: rai_op.h)")
    try:
        error = compare(run.ops, run.reference, ranked.rtol)
    except Mismatch as why:
        raise _Unranked(f"{where}: {why}") from None
    if len(run.ops) % run.passes:
        raise _Unranked(f"{where}: its {len(run.ops)} operations are not {run.passes} passes of the course's")
    per = len(run.ops) // run.passes

    def totals(ops: list[OpMeasure]) -> list[float]:
        return [sum(op.seconds or 0.0 for op in ops[i : i + per]) for i in range(0, len(ops), per)]

    return totals(run.ops), totals(run.reference), error


def _copied_in(so_far: bool | None, ops: list[OpMeasure]) -> bool | None:
    """How the operations so far got their inputs (``Measured.inputs_copied_in``): False once one
    read them from rai-timed's memory ("P"), else None once one's mark went unsaid."""
    marks = [so_far, *(op.copied_in for op in ops)]
    return False if False in marks else None if None in marks else True


def summarize(
    runs: list[MeasuredRun] | None,
    spec: CourseSpec,
    version: int,
    printed_op_time: float | None,
    gpu_name: str | None = None,
    planned: int | None = None,
    kernels: list[KernelTime] | None = None,
) -> Measured:
    """The ranked number of a ranked job: the median total of the course's operations' times over
    every pass of every timed run, as rai-timed took them, when every run's outputs agree with the
    course's reference (issue 46).
    ``planned``: how many timed runs there were to be (a failed one ends the others); ``kernels``:
    the course's profiled run's kernel table (feedback, and a cross-check: never the number)."""
    ranked = spec.ranked
    m = Measured(course_version=version, measure=ranked.measure, printed_op_time=printed_op_time, kernels=kernels or [])
    if ranked.measure != "op":
        m.problem = (
            f"the course's build file (version {version}) is timed with measure: {ranked.measure}, which no longer ranks: "
            "instructors, install one whose harness marks the operation (measure: op)"
        )
        return m
    if not runs:
        m.problem = "the timed runs did not happen (the build did not succeed)"
        return m
    totals: list[float] = []  # every pass of every run
    run_medians: list[float] = []  # each run's median pass: the runs are the independent samples
    references: list[float] = []
    errors: list[float] = []
    floor = floor_seconds(ranked, gpu_name)
    try:
        for i, run in enumerate(runs, 1):
            where = f"timed run {i} of {max(len(runs), planned or ranked.repeats)}"
            if run.cpu_seconds is not None:
                m.cpu_seconds.append(round(run.cpu_seconds, 3))
            if run.gpu:
                m.gpu.append(dict(run.gpu))
            _ended_well(run, where)
            _within_cpu_budget(run, ranked, where)
            passes, reference, error = _checked_totals(run, ranked, where)
            if floor is not None and min(passes) < floor:
                m.flags.append(QUARANTINE)
                raise _Unranked(
                    f"{where} took {in_words(min(passes))}, below the physics floor of {in_words(floor)} for this operation on this GPU"
                )
            totals += passes
            run_medians.append(statistics.median(passes))
            references += reference
            m.inputs_copied_in = _copied_in(m.inputs_copied_in if i > 1 else True, run.ops)
            errors.append(error)
            m.passes = run.passes
            total = sum(passes)
            busy = sum(op.cpu_seconds or 0.0 for op in run.ops)
            if total > 0 and busy > CPU_BUSY * total and not any(f.startswith(CPU_BUSY_FLAG) for f in m.flags):
                m.flags.append(f"{CPU_BUSY_FLAG}: {busy:.3g} s of CPU in {in_words(total)} of operations ({where})")
    except _Unranked as why:
        m.problem = str(why)
        return m
    median = statistics.median_low(totals)
    mean = statistics.fmean(totals)
    m.runs = [round(t, 9) for t in totals]
    m.op_time = round(median, 9)
    m.spread = round(max(totals) - min(totals), 9)
    m.cv = round(statistics.pstdev(totals) / mean, 6) if mean > 0 else None
    m.ci = round(half_width(run_medians), 9)  # passes of one run share its process: the runs are what is independent
    m.accuracy = 1.0  # every output of every run agreed with the reference (the board's gate)
    m.error = max(errors)
    m.reference_time = round(statistics.median_low(references), 9)
    m.flags = _flags(m, ranked, printed_op_time, median)
    return m


def _kernel_flags(flags: list[str], kernels: list[KernelTime], median: float) -> list[str]:
    """The profiler's cross-check: its kernels' total against the measured operations. More than
    they can contain is flagged; a CPU busy during operations that the kernels do not fill is said
    with the kernels' share."""
    if not kernels or median <= 0:
        return flags
    total = sum(k.ms for k in kernels) / 1e3
    if total > KERNELS_PAST * median:
        flags.append(
            f"the profiled run's kernels took {in_words(total)}, more than the operations' measured {in_words(median)}: "
            "under the profiler the program did GPU work its timed runs did not show, or ran kernels outside its operations"
        )
    return [f"{f}; the profiled run's kernels: {in_words(total)}" if f.startswith(CPU_BUSY_FLAG) else f for f in flags]


def _flags(m: Measured, ranked: Ranked, printed_op_time: float | None, median: float) -> list[str]:
    """What staff should look at: a printed time far from the measured one, a GPU that slowed
    down, timed runs that varied, a CPU busy during the operations, the profiler's kernels."""
    flags = _kernel_flags(list(m.flags), m.kernels, median)
    if printed_op_time is not None and median > 0 and abs(printed_op_time - median) > ranked.tolerance * median:
        flags.append(f"the program printed an op time of {printed_op_time:.6g} s; the service measured {median:.6g} s")
    for i, state in enumerate(m.gpu, 1):
        slowed = gpu_slowdowns(state)
        if slowed:
            flags.append(f"the GPU slowed down during timed run {i} ({', '.join(slowed)})")
        others = max((state.get(when) or {}).get("others", 0) for when in ("before", "after"))
        if others:
            flags.append(f"{others} process(es) other than the run's used the GPU around timed run {i}")
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
