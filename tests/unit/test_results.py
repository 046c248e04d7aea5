"""Results parsed from output, with the students' real reports as fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

from raiprotocol.models import LogLine, LogStream
from raiserver.grading.results import parse_log, parse_text_lines

FIX = Path(__file__).parent.parent / "fixtures"


def test_op_times_correctness_and_time_from_a_real_report():
    lines = (FIX / "seed_report_m3.txt").read_text().splitlines()
    start = next(i for i, ln in enumerate(lines) if "Op Time: 0.074735" in ln)
    r = parse_text_lines(lines[start : start + 8])
    assert r.op_times == [0.074735, 0.255830]
    assert r.op_time_total == 0.330565
    assert r.correctness == {"ece408": 0.88}
    assert r.elapsed_seconds == 1.09
    assert r.max_rss_kb == 175624


def test_models_and_elapsed_minutes_from_nvprof_report():
    r = parse_text_lines((FIX / "seed_report_nvprof.txt").read_text().splitlines())
    assert r.correctness["ece408-high"] == 0.8562
    assert r.correctness["ece408-low"] == 0.629
    r1 = parse_text_lines((FIX / "seed_report_m1.txt").read_text().splitlines())
    assert r1.elapsed_seconds == 10.74 and r1.max_rss_kb == 2843392


def test_summary_is_the_first_timed_run_not_a_sum_nor_a_profiled_rerun():
    def L(n, s, text):
        return LogLine(n=n, t=0, s=s, text=text)

    log = [
        L(1, LogStream.sys, "Running: make m2"),
        L(2, LogStream.sys, "Running: /usr/bin/time ./m2 10000"),
        L(3, LogStream.out, "Op Time: 2.0"),
        L(4, LogStream.out, "Op Time: 3.0"),
        L(5, LogStream.out, "Correctness: 0.8562 Model: ece408"),
        L(6, LogStream.err, "1.10user 0.58system 1:02.50elapsed 154%CPU (0avgtext+0avgdata 175624maxresident)k"),
        L(7, LogStream.sys, "Running: ncu --section SpeedOfLight ./m2 100"),
        L(8, LogStream.out, "Op Time: 1.4 Op Time: 0.3"),
        L(9, LogStream.out, "Correctness: 0.89 Model: ece408"),
        L(10, LogStream.sys, "Running: ./m2 100"),
        L(11, LogStream.out, "Op Time: 0.5 Op Time: 0.25"),
    ]
    r = parse_log(log)
    assert r.op_times == [2.0, 3.0] and r.op_time_total == 5.0
    assert r.correctness == {"ece408": 0.8562}
    assert r.elapsed_seconds == 62.5 and r.max_rss_kb == 175624


def test_correctness_printed_by_another_command_is_kept():
    """Issue 49: a build file that prints Op Time from one command and Correctness from another
    (before or after it) lost the correctness, and a 'pass' grade became 0."""

    def L(n, s, text):
        return LogLine(n=n, t=0, s=s, text=text)

    log = [
        L(1, LogStream.sys, "Running: ./check-accuracy"),
        L(2, LogStream.out, "Correctness: 0.91 Model: first"),
        L(3, LogStream.sys, "Running: ./m1 1000"),
        L(4, LogStream.out, "Op Time: 0.25"),
        L(5, LogStream.sys, "Running: ncu ./m1 10"),
        L(6, LogStream.out, "Correctness: 0.10 Model: profiled"),
        L(7, LogStream.sys, "Running: ./validate"),
        L(8, LogStream.out, "Correctness: 0.88 Model: after"),
    ]
    r = parse_log(log)
    assert r.op_time_total == 0.25 and r.correctness == {"after": 0.88, "first": 0.91}  # not the profiled one
    log.insert(4, L(9, LogStream.out, "Correctness: 0.95 Model: first"))  # the timed command's own wins
    assert parse_log(log).correctness["first"] == 0.95


def test_repeated_timing_runs_report_the_median_and_the_spread():
    def L(n, s, text):
        return LogLine(n=n, t=0, s=s, text=text)

    log = [
        L(1, LogStream.sys, "Running: ./m2 10000"),
        L(2, LogStream.out, "Op Time: 0.010 Op Time: 0.020"),
        L(3, LogStream.out, "Correctness: 0.89 Model: ece408"),
        L(4, LogStream.sys, "Running: ncu ./m2 100"),
        L(5, LogStream.out, "Op Time: 9.0"),
        L(6, LogStream.sys, "Repeat 2 of 3: ./m2 10000"),
        L(7, LogStream.out, "Op Time: 0.012 Op Time: 0.022"),
        L(8, LogStream.sys, "Repeat 3 of 3: ./m2 10000"),
        L(9, LogStream.out, "Op Time: 0.011 Op Time: 0.019"),
    ]
    r = parse_log(log)
    assert r.op_time_runs == [0.03, 0.034, 0.03]
    assert r.op_time_total == 0.03 and r.op_time_spread == 0.004
    assert r.correctness == {"ece408": 0.89}


def test_kernel_times_from_ncu_in_a_real_h100_transcript():
    from raiserver.grading.results import parse_kernels

    text = (FIX / "h100_submit_transcript.txt").read_text().splitlines()
    kernels = parse_kernels(text)
    assert [k.name for k in kernels] == ["conv_forward_kernel"]
    assert kernels[0].ms == pytest.approx(0.02541 + 0.12822)


def test_skipping_unmarked_batches_changes_no_result():
    """The server parses only batches that hold a marker; the results must be those of a full parse,
    however the output was cut into batches (nsys tables split across batches included)."""
    import random

    from raiserver.grading.results import relevant_lines

    nsys = [
        " Time (%)  Total Time (ns)  Instances  Avg (ns)  Med (ns)  Min (ns)  Max (ns)  StdDev (ns)  Name",
        " --------  ---------------  ---------  --------  --------  --------  --------  -----------  ----",
        "     80.0          4000000          2   2000000   2000000   1000000   3000000      1414213  conv_forward_kernel(float *)",
        "     20.0          1000000          1   1000000   1000000   1000000   1000000            0  prefn_marker_kernel()",
        "",
        "later output 1 2 3 4",
    ]
    for name in ("seed_report_m3.txt", "seed_report_nvprof.txt", "h100_submit_transcript.txt"):
        text = (FIX / name).read_text().splitlines() + nsys + [f"filler {i}" for i in range(200)]
        full = [
            LogLine(n=0, t=0, s=LogStream.sys if t.startswith("✱ Running:") else LogStream.out, text=t.removeprefix("✱ ")) for t in text
        ]
        want = parse_log(full)
        rng = random.Random(name)
        for _ in range(20):
            batches, i = [], 0
            while i < len(full):
                if full[i].s is LogStream.sys:
                    batches.append(("sys", full[i].text))
                    i += 1
                    continue
                k = rng.randint(1, 12)
                run = [ln.text for ln in full[i : i + k]]
                run = run[: next((j for j, ln in enumerate(full[i : i + k]) if ln.s is LogStream.sys), len(run))]
                batches.append(("out", "\n".join(run)))
                i += len(run)
            assert parse_log(relevant_lines(batches)) == want, name
        assert want.kernels or name != "h100_submit_transcript.txt"
