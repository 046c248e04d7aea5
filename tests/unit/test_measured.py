"""Issue 23: the ranked numbers come from the profiler's report and the server's own answers.

ncu-h100-m2-baseline.ncu-rep was recorded on the H100 by root's `ncu --mode attach` while the
job's user ran examples/ece408-conv's m2 (10,000 images) under `ncu --mode launch`; the .csv
beside it is what `ncu --import … --csv --page raw --metrics gpu__time_duration.sum` printed for
it there, which is what the worker sends. CI has no ncu: the parser is tested on that export."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from raiprotocol.models import MeasuredRun
from raiprotocol.spec import parse_course_spec
from raiserver.grading.measured import ReportError, accuracy, kernel_times, summarize

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "ncu-h100-m2-baseline.csv"
SPEC = parse_course_spec("""
rai: {image: rai/ece408:cuda13}
commands: {build: [make m2]}
ranked: {student_files: [new-forward.cu], timed: ./m2 10000, repeats: 3}
""")
LABELS = "1\n2\n3\n"


def run(report: str, predictions: str | None = "1\n2\n3\n", code: int = 0) -> MeasuredRun:
    return MeasuredRun(exit_code=code, wall_seconds=1.0, report=report, predictions=predictions)


def test_the_h100_report_gives_each_launch_in_seconds():
    launches = kernel_times(FIXTURE.read_text())
    assert [name.split("(")[0] for name, _ in launches] == ["conv_forward_kernel"] * 2
    assert [round(t, 9) for _, t in launches] == [0.0020232, 0.009225024]


def test_the_median_run_ranks_and_the_spread_and_kernels_are_kept():
    base = FIXTURE.read_text()
    slower = base.replace('"9.225024"', '"9.425024"')
    faster = base.replace('"9.225024"', '"9.125024"')
    m = summarize([run(slower), run(base), run(faster)], SPEC, 4, LABELS, printed_op_time=0.0113)
    assert m.op_time == round(0.0020232 + 0.009225024, 9) and m.runs[1] == m.op_time
    assert m.spread == pytest.approx(0.0003) and 0 < m.cv < 0.02 and m.accuracy == 1.0 and m.course_version == 4
    assert m.kernels[0].name == "conv_forward_kernel" and m.kernels[0].ms == pytest.approx(11.248224)
    assert m.flags == [] and m.problem is None


def test_every_kernel_counts_whatever_its_name():
    """A kernel renamed to look like a harness kernel, with commas and quotes in its name (which
    ncu's CSV quotes), is timed like any other: the total is the GPU time of every launch."""
    base = FIXTURE.read_text()
    renamed = base.replace("conv_forward_kernel(", 'harness_reference_kernel<""ms"", 2>(', 1)
    assert kernel_times(renamed)[0][0].startswith('harness_reference_kernel<"ms", 2>(')
    assert sum(t for _, t in kernel_times(renamed)) == pytest.approx(sum(t for _, t in kernel_times(base)))
    m = summarize([run(renamed)] * 3, SPEC, 1, LABELS, None)
    assert m.op_time == pytest.approx(0.011248224)


def test_printed_numbers_never_rank_and_a_disagreement_is_flagged():
    m = summarize([run(FIXTURE.read_text(), "1\n9\n9\n")] * 3, SPEC, 1, LABELS, printed_op_time=0.000001)
    assert m.accuracy == pytest.approx(1 / 3) and m.printed_op_time == 0.000001
    assert m.flags == ["the program printed an op time of 1e-06 s; the service measured 0.0112482 s"]


def test_runs_that_cannot_rank_say_why():
    report = FIXTURE.read_text()
    header = "\n".join(report.splitlines()[:2])
    assert summarize(None, SPEC, 1, LABELS, None).problem == "the timed runs did not happen (the build did not succeed)"
    assert summarize([run(report), run(header)], SPEC, 1, LABELS, None).problem == "timed run 2 of 2 launched no GPU kernel"
    assert summarize([run(report, None)], SPEC, 1, LABELS, None).problem.startswith("timed run 1 of 1 left no predictions.txt")
    assert summarize([run(report, code=139)], SPEC, 1, LABELS, None).problem == "timed run 1 of 1 exited with status 139"
    assert "no kernel durations" in summarize([run("Op Time: 0.0001\n")], SPEC, 1, LABELS, None).problem
    with pytest.raises(ReportError, match="unknown unit"):
        kernel_times(report.replace('"ms"', '"fortnights"'))
    with pytest.raises(ReportError, match="not a number"):
        kernel_times(report.replace('"2.023200"', '"1e999x"'))


def test_answers_are_compared_line_by_line_and_missing_ones_are_wrong():
    assert accuracy("1\n2\n3\n", ["1", "2", "3"]) == 1.0
    assert accuracy(" 1 \n2\r\n", ["1", "2", "3"]) == pytest.approx(2 / 3)
    assert accuracy("1\n2\n3\n4\n5\n", ["1", "2", "3"]) == 1.0  # extra lines change nothing
    assert accuracy("", ["1"]) == 0.0


def test_a_hostile_report_or_predictions_file_costs_milliseconds():
    rows = '"0","1","m2","h","' + "k" * 5000 + '","1","7","(1, 1, 1)","(1, 1, 1)","0","9.0","1.0"\n'
    report = FIXTURE.read_text().splitlines(keepends=True)[0] + '"","","","","","","","","","","","ms"\n' + rows * 300
    started = time.monotonic()
    launches = kernel_times(report)
    predictions = "7\n" * 500_000
    accuracy(predictions, ["7"] * 10_000)
    assert time.monotonic() - started < 1.0
    assert all(len(name) == 200 for name, _ in launches)


def test_a_run_over_the_courses_cpu_budget_does_not_rank_and_says_why():
    """Issue 32: answers computed on the host's CPU (threads, AVX) instead of the GPU: the CPU time
    of every process of a timed run, read outside the container, is over the course's budget."""
    spec = parse_course_spec("""
rai: {image: rai/ece408:cuda13}
commands: {build: [make m2]}
ranked: {student_files: [new-forward.cu], timed: ./m2 10000, repeats: 3, measure: wall, cpu_seconds: 2, keep: [m2]}
""")
    ok = [MeasuredRun(exit_code=0, wall_seconds=0.5, predictions=LABELS, cpu_seconds=0.4) for _ in range(3)]
    m = summarize(ok, spec, 1, LABELS, None)
    assert m.problem is None and m.cpu_seconds == [0.4, 0.4, 0.4] and m.ci == 0.0
    burnt = [*ok[:2], MeasuredRun(exit_code=0, wall_seconds=0.01, predictions=LABELS, cpu_seconds=14.2)]
    assert summarize(burnt, spec, 1, LABELS, None).problem == "14.2 s of CPU time in timed run 3 of 3 (the course allows 2 s)"
    unread = [*ok[:2], MeasuredRun(exit_code=0, wall_seconds=0.5, predictions=LABELS, cpu_seconds=None)]
    assert summarize(unread, spec, 1, LABELS, None).problem == "timed run 3 of 3: its CPU time could not be read"


def test_the_interval_is_a_95_percent_one_of_the_runs_mean():
    from raiserver.grading.measured import half_width

    assert half_width([1.0]) == 0.0
    assert abs(half_width([1.0, 1.1, 1.2]) - 4.303 * 0.1 / 3**0.5) < 1e-9


def test_the_gpus_state_is_kept_per_run_and_a_slowdown_flagged():
    state = {"sm_mhz": 1755, "mem_mhz": 2619, "temp_c": 41, "power_w": 160.2, "throttle": []}
    slowed = {**state, "throttle": ["hardware thermal slowdown"]}
    runs = [
        MeasuredRun(exit_code=0, wall_seconds=0.5, report=FIXTURE.read_text(), predictions=LABELS, gpu={"before": state, "after": after})
        for after in (state, slowed, state)
    ]
    m = summarize(runs, SPEC, 1, LABELS, None)
    assert len(m.gpu) == 3 and m.gpu[0]["after"]["sm_mhz"] == 1755
    assert "the GPU slowed down during timed run 2 (hardware thermal slowdown)" in m.flags
