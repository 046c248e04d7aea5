"""Every pattern that reads job output, fuzzed with adversarial lines up to the log's line limit:
each line parses in bounded time (issue 22: one crafted line held the server's GIL for minutes,
the nsys row pattern cubic in its spaces, the GNU time and Correctness patterns quadratic in digits)."""

from __future__ import annotations

import random
import time

import pytest

from raiprotocol.models import LogStream
from raiserver.grading.results import PATTERNS, Line, parse_log, parse_text_lines, relevant_lines

LINE_LIMIT = 64 * 1024  # the worker's RAI_LINE_BYTES default: no stored line is longer
HEADER = " Time (%)  Total Time (ns)  Instances  Name"

# the pieces each pattern is built from: runs of them are where a backtracking engine explodes
PIECES = [
    " ",
    "1",
    "1 ",
    "1.",
    ".",
    ",",
    ":",
    "1:",
    "(",
    ")",
    "(1, 1, 1)x(1, 1, 1)",
    "a",
    "a ",
    "Op Time:",
    "Op Time: 1",
    "Correctness: 1",
    "Correctness:",
    " Model:",
    "user ",
    "system ",
    "elapsed ",
    "maxresident",
    "Duration ",
    "ns ",
]


def adversarial_lines(rng: random.Random) -> list[str]:
    lines = [
        "1 1 1" + " " * (LINE_LIMIT - 5),  # the attack reported in issue 22 (nsys row)
        "1" * LINE_LIMIT,  # GNU time: digit runs
        "Correctness: " + "1" * (LINE_LIMIT - 13),
        "Op Time: " + " " * (LINE_LIMIT - 10) + "x",
        "  a" + " a" * (LINE_LIMIT // 2 - 2),  # ncu kernel name
        "  Duration" + " " * (LINE_LIMIT - 20) + "ns 1.",
        ("1." * (LINE_LIMIT // 2)),
        ("1 user " * (LINE_LIMIT // 7)),
    ]
    for _ in range(60):
        piece = rng.choice(PIECES)
        mix = [rng.choice(PIECES) for _ in range(3)]
        body = piece * (LINE_LIMIT // len(piece))
        lines.append((rng.choice(mix) + body)[: LINE_LIMIT - 1] + rng.choice(["", "x", " ", "\t"]))
    return lines


def test_every_pattern_is_linear_on_adversarial_lines():
    lines = adversarial_lines(random.Random(22))
    assert all(len(t) <= LINE_LIMIT for t in lines)
    worst = 0.0
    for pattern in PATTERNS:
        for text in lines:
            took = []
            for _ in range(3):  # the fastest of three: a busy machine's pause falls on one, a backtracking engine's cost on all
                start = time.perf_counter()
                pattern.search(text)
                pattern.findall(text)
                took.append(time.perf_counter() - start)
            worst = max(worst, min(took))
    # a backtracking engine took 16 s on 2,000 spaces; linear matching of 64 KiB is well under this
    assert worst < 0.5, f"slowest match took {worst:.2f} s"


def test_a_whole_poisoned_log_parses_in_bounded_time():
    """The server parses at a job's end (and again if the end is re-sent after a restart)."""
    lines = adversarial_lines(random.Random(7))
    log = [Line(LogStream.sys, "Running: ./m1")]
    for text in lines:
        log += [Line(LogStream.out, HEADER), Line(LogStream.out, text)]
    start = time.perf_counter()
    summary = parse_log(log)
    batches = [("out", HEADER + "\n" + t) for t in lines]
    list(relevant_lines(batches))
    assert time.perf_counter() - start < 10
    assert summary.model_dump_json()  # finite numbers only: the results are stored as JSON


@pytest.mark.parametrize(
    "text",
    [
        "Op Time: 1e999",
        "Op Time: " + "9" * 400,
        "Correctness: 1" + "0" * 5000 + " Model: x",
        "1.2.3user 0.1system 1:2:3:4elapsed 99%CPU (0avgtext+0avgdata " + "9" * 5000 + "maxresident)k",
    ],
)
def test_absurd_numbers_are_left_out_not_crashing(text):
    r = parse_text_lines([text])
    assert r.op_times == [] and r.correctness == {} and r.max_rss_kb is None
    assert r.model_dump_json()


def test_honest_lines_still_parse():
    r = parse_text_lines(
        [
            "Op Time: 0.25 ms",
            "Correctness: 0.8714 Model: ece408",
            "1.50user 0.20system 0:02.10elapsed 80%CPU (0avgtext+0avgdata 123456maxresident)k",
        ]
    )
    assert r.op_times == [0.25] and r.correctness == {"ece408": 0.8714}
    assert (r.elapsed_seconds, r.max_rss_kb) == (2.1, 123456)


def test_every_pattern_of_the_results_module_is_declared_with_its_marker():
    """Issue 27: a pattern compiled without its marker would be skipped by relevant_lines() and
    never fuzzed; every compiled pattern of the module must come from results.pattern()."""
    import re2

    from raiserver.grading import results

    compiled = [v for v in vars(results).values() if isinstance(v, type(re2.compile("x")))]
    assert compiled and all(any(p is c for p in results.PATTERNS) for c in compiled)
    assert len(results.MARKERS) == len(results.PATTERNS) and all(results.MARKERS)
