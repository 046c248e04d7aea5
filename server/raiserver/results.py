"""Results read from a job's output: the course programs' ``Op Time:`` and ``Correctness:`` lines
and GNU ``/usr/bin/time``'s summary. Lines are grouped by command. The op times and correctness
come from the first command that printed op times and was not run under a profiler (ncu, nsys,
nvprof, compute-sanitizer inflate timings): the canonical timed run, not a sum across runs at
several batch sizes nor a profiled re-run.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from raiclient.models import JobResultSummary, KernelTime, LogLine, LogStream

OP_TIME = re.compile(r"Op Time:\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)")
CORRECTNESS = re.compile(r"Correctness:\s*([0-9]*\.?[0-9]+)\s+Model:\s*(\S+)")
GNU_TIME = re.compile(
    r"(?P<user>[\d.]+)\s*user\s+(?P<sys>[\d.]+)\s*system\s+(?P<elapsed>[\d:.]+)\s*elapsed.*?(?P<rss>\d+)\s*maxresident"
)


NCU_KERNEL = re.compile(r"^\s{1,4}([A-Za-z_][\w:<>, ]*?)(?:\(.*\))?\s+\(\d+, \d+, \d+\)x\(\d+, \d+, \d+\), Context")
NCU_DURATION = re.compile(r"^\s+Duration\s+(ns|us|usecond|ms|msecond|s|second)\s+([\d.,]+)\s*$")
NSYS_ROW = re.compile(r"^\s*([\d.]+)\s+([\d,]+)\s+(\d+)\s+.*?\s{2,}(\S.*)$")
_UNIT_MS = {"ns": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0, "s": 1e3, "second": 1e3}


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
            totals[current] = totals.get(current, 0.0) + float(m.group(2).replace(",", "")) * _UNIT_MS[m.group(1)]
            current = None
            continue
        if "Total Time (ns)" in text and "Name" in text:
            in_nsys = True
            continue
        if in_nsys:
            m = NSYS_ROW.match(text)
            if m:
                name = m.group(4).split("(")[0].strip()
                totals[name] = totals.get(name, 0.0) + int(m.group(2).replace(",", "")) * 1e-6
            elif text.strip() and not set(text.strip()) <= set("-  "):
                in_nsys = False
    return [KernelTime(name=k, ms=round(v, 6)) for k, v in sorted(totals.items(), key=lambda kv: -kv[1])]


def _clock(text: str) -> float:
    seconds = 0.0
    for part in text.split(":"):
        seconds = seconds * 60 + float(part)
    return seconds


def parse_text_lines(lines: Iterable[str]) -> JobResultSummary:
    """Parse plain output lines (one command's worth, or a whole report)."""
    r = JobResultSummary()
    for text in lines:
        ops = [float(v) for v in OP_TIME.findall(text)]
        r.op_times.extend(ops)
        for value, model in CORRECTNESS.findall(text):
            r.correctness[model] = float(value)
        m = GNU_TIME.search(text)
        if m:
            r.elapsed_seconds = _clock(m.group("elapsed"))
            r.max_rss_kb = int(m.group("rss"))
    if r.op_times:
        r.op_time_total = round(sum(r.op_times), 9)
    return r


PROFILERS = re.compile(r"(^|[\s/;&|(])(ncu|nsys|nvprof|nv-nsight-cu-cli|compute-sanitizer|cuda-memcheck)(\s|$)")


def parse_log(lines: Iterable[LogLine]) -> JobResultSummary:
    runs: list[tuple[str, list[str]]] = [("", [])]
    for line in lines:
        if line.s is LogStream.sys:
            if line.text.startswith("Running:"):
                runs.append((line.text.removeprefix("Running:").strip(), []))
            continue
        runs[-1][1].append(line.text)
    summary = JobResultSummary(kernels=parse_kernels(text for _, run in runs for text in run))
    for command, run in runs:
        if PROFILERS.search(command):
            continue
        parsed = parse_text_lines(run)
        if parsed.op_times:
            summary.op_times, summary.op_time_total = parsed.op_times, parsed.op_time_total
            summary.correctness = parsed.correctness
            summary.elapsed_seconds, summary.max_rss_kb = parsed.elapsed_seconds, parsed.max_rss_kb
            return summary
        summary.correctness.update(parsed.correctness)
    return summary
