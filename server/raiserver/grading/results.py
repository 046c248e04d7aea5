"""Results read from a job's output: the course programs' ``Op Time:`` and ``Correctness:`` lines
and GNU ``/usr/bin/time``'s summary. Lines are grouped by command. The op times come from the
first command that printed op times and was not run under a profiler (ncu, nsys, nvprof,
compute-sanitizer inflate timings): the canonical timed run, not a sum across runs at several batch
sizes nor a profiled re-run. Correctness comes from that command, else from any other unprofiled one.

Every byte parsed here is the job's, and a line may be 64 KiB: the patterns run on RE2, whose
matching time is linear in the line whatever the pattern (Python's backtracking engine took minutes
over one crafted line and held the GIL, freezing the server for everyone).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Iterator
from typing import NamedTuple

import re2

from raiprotocol.markers import REPEAT_PREFIX, command_of, is_profiled
from raiprotocol.models import JobResultSummary, KernelTime, LogLine, LogStream

_REGISTERED: list[tuple[re2._Regexp, str]] = []


def pattern(regex: str, marker: str) -> re2._Regexp:
    """A pattern for job output and the text every line it reads holds. relevant_lines() keeps
    only log batches holding a marker, so a pattern is declared with its marker or not at all
    (a pattern added without one would never see its lines); the fuzz test runs every one."""
    compiled = re2.compile(regex)
    _REGISTERED.append((compiled, marker))
    return compiled


OP_TIME = pattern(r"Op Time:\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)", "Op Time")
CORRECTNESS = pattern(r"Correctness:\s*([0-9]*\.?[0-9]+)\s+Model:\s*(\S+)", "Correctness")
GNU_TIME = pattern(
    r"(?P<user>[\d.]+)\s*user\s+(?P<sys>[\d.]+)\s*system\s+(?P<elapsed>[\d:.]+)\s*elapsed.*?(?P<rss>\d+)\s*maxresident", "elapsed"
)


NCU_KERNEL = pattern(r"^\s{1,4}([A-Za-z_][\w:<>, ]*?)(?:\(.*\))?\s+\(\d+, \d+, \d+\)x\(\d+, \d+, \d+\), Context", "Context")
NCU_DURATION = pattern(r"^\s+Duration\s+(ns|us|usecond|ms|msecond|s|second)\s+([\d.,]+)\s*$", "Duration")
# a row of nsys's kernel table: the batches after its header are kept while rows continue
NSYS_ROW = pattern(r"^\s*([\d.]+)\s+([\d,]+)\s+(\d+)\s+.*?\s{2,}(\S.*)$", "Total Time (ns)")

_UNIT_MS = {"ns": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0, "s": 1e3, "second": 1e3}


MAX_DIGITS = 30  # a longer number is noise (or an attack: int() refuses over 4,300 digits)
MAX_VALUES = 1000  # op times or models kept per command: the results are a row, not a copy of the log


def _number(text: str) -> float | None:
    """A finite number from the job's text, or None: JSON (and PostgreSQL) have no inf or nan."""
    if len(text) > MAX_DIGITS:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def parse_kernels(lines: Iterable[str]) -> list[KernelTime]:
    """Time per kernel from ncu (Duration of each profiled launch) or nsys --stats (kernel summary)."""
    totals: dict[str, float] = {}
    current: str | None = None
    in_nsys = False
    for text in lines:
        m = NCU_KERNEL.match(text)
        if m:
            current = m.group(1).strip()
            continue
        m = NCU_DURATION.match(text)
        if m and current:
            duration = _number(m.group(2).replace(",", ""))
            if duration is not None:
                totals[current] = totals.get(current, 0.0) + duration * _UNIT_MS[m.group(1)]
            current = None
            continue
        if "Total Time (ns)" in text and "Name" in text:
            in_nsys = True
            continue
        if in_nsys:
            m = NSYS_ROW.match(text)
            total_ns = _number(m.group(2).replace(",", "")) if m else None
            if m and total_ns is not None:
                name = m.group(4).split("(")[0].strip()
                totals[name] = totals.get(name, 0.0) + total_ns * 1e-6
            elif text.strip() and not set(text.strip()) <= set("-  "):
                in_nsys = False
    return [KernelTime(name=k, ms=round(v, 6)) for k, v in sorted(totals.items(), key=lambda kv: -kv[1])]


def _clock(text: str) -> float | None:
    """GNU time's elapsed [[h:]m:]s.ss in seconds, or None if it is not one."""
    seconds = 0.0
    parts = text.split(":")
    if len(parts) > 3:
        return None
    for part in parts:
        value = _number(part)
        if value is None:
            return None
        seconds = seconds * 60 + value
    return seconds


def parse_text_lines(lines: Iterable[str]) -> JobResultSummary:
    """Parse plain output lines (one command's worth, or a whole report)."""
    r = JobResultSummary()
    for text in lines:
        if len(r.op_times) < MAX_VALUES:
            r.op_times.extend(v for v in map(_number, OP_TIME.findall(text)) if v is not None)
        for value, model in CORRECTNESS.findall(text):
            number = _number(value)
            if number is not None and len(r.correctness) < MAX_VALUES:
                r.correctness[model[:64]] = number
        m = GNU_TIME.search(text)
        rss = _number(m.group("rss")) if m else None
        elapsed = _clock(m.group("elapsed")) if m else None
        if elapsed is not None and rss is not None:
            r.elapsed_seconds, r.max_rss_kb = elapsed, int(rss)
    if r.op_times:
        r.op_time_total = round(sum(r.op_times), 9)
    return r


# Every line a parser above can use holds one of these (or is a row of an nsys table).
PATTERNS = tuple(compiled for compiled, _ in _REGISTERED)  # the fuzz test runs each
MARKERS = tuple(marker for _, marker in _REGISTERED)


class Line(NamedTuple):
    s: LogStream
    text: str


class RelevantLines:
    """The lines of a log, fed batch by batch as (stream, text), that the parsers can use: a batch
    holding no marker is skipped whole, so a log of millions of lines parses in a moment. rai's own
    lines are kept (they separate commands), and so is a batch that continues an nsys table. Fed
    while the log is stored, so that a job's end reads its log once (issue 38); the batches kept
    are split into lines only as ``lines()`` is read."""

    def __init__(self) -> None:
        self._kept: list[tuple[LogStream, str]] = []
        self._table = False
        self._streams = {s.value: s for s in LogStream}

    def feed(self, stream: str, text: str) -> None:
        if not (stream == "sys" or self._table or any(m in text for m in MARKERS)):
            return
        self._kept.append((self._streams.get(stream, LogStream.out), text))
        if stream != "sys":
            last = next((t for t in reversed(text.split("\n")) if t.strip()), "")
            self._table = (self._table or "Total Time (ns)" in text) and bool(
                NSYS_ROW.match(last) or "Total Time (ns)" in last or set(last.strip()) <= set("- ")
            )

    def lines(self) -> Iterator[Line]:
        for kind, text in self._kept:
            for t in text.split("\n"):
                yield Line(kind, t)


def relevant_lines(batches: Iterable[tuple[str, str]]) -> Iterator[Line]:
    """``RelevantLines`` over a whole log's batches."""
    relevant = RelevantLines()
    for stream, text in batches:
        relevant.feed(stream, text)
    return relevant.lines()


def parse_log(lines: Iterable[LogLine | Line]) -> JobResultSummary:
    runs: list[tuple[str, bool, list[str]]] = [("", False, [])]  # (command, is a repeat, its output)
    for line in lines:
        if line.s is LogStream.sys:
            command = command_of(line.text)
            if command is not None:
                runs.append((command, False, []))
            elif line.text.startswith(REPEAT_PREFIX) and ": " in line.text:
                runs.append((line.text.split(": ", 1)[1], True, []))
            continue
        runs[-1][2].append(line.text)
    summary = JobResultSummary(kernels=parse_kernels(text for _, _, run in runs for text in run))
    for i, (command, repeat, run) in enumerate(runs):
        if repeat or is_profiled(command):
            continue
        parsed = parse_text_lines(run)
        if not parsed.op_times:
            summary.correctness.update(parsed.correctness)
            continue
        timed = [parsed] + [parse_text_lines(r) for c, rep, r in runs[i + 1 :] if rep and c == command]
        timed = [t for t in timed if t.op_times]
        best = timed[0]
        if len(timed) > 1:  # the median run stands for the job; the spread says how noisy it was
            totals = [round(sum(t.op_times), 9) for t in timed]  # each run's op_time_total
            median = statistics.median_low(totals)
            best = timed[totals.index(median)]
            summary.op_time_runs = totals
            summary.op_time_spread = round(max(totals) - min(totals), 9)
        summary.op_times, summary.op_time_total = best.op_times, best.op_time_total
        # correctness printed by another command (before or after it) counts too; the timed
        # command's own wins (issue 49: an m1 grade became 0 for a Correctness line of its own)
        later: dict[str, float] = {}
        for c, rep, r in runs[i + 1 :]:
            if not rep and not is_profiled(c):
                later.update(parse_text_lines(r).correctness)
        merged = {**later, **summary.correctness, **parsed.correctness}
        summary.correctness = dict(list(merged.items())[:MAX_VALUES])
        summary.elapsed_seconds, summary.max_rss_kb = parsed.elapsed_seconds, parsed.max_rss_kb
        return summary
    return summary
