"""What counts as a timing run, shared by the worker (which repeats it) and the server (which
reads its results): a command that printed ``Op Time:`` and did not run under a profiler, since
ncu, nsys, nvprof and compute-sanitizer inflate the timings they observe."""

from __future__ import annotations

import re

OP_TIME = re.compile(r"Op Time:\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)")
PROFILERS = re.compile(r"(^|[\s/;&|(])(ncu|nsys|nvprof|nv-nsight-cu-cli|compute-sanitizer|cuda-memcheck)(\s|$)")
REPEAT_PREFIX = "Repeat "  # "Repeat 2 of 3: <command>" in the log


def is_profiled(command: str) -> bool:
    return bool(PROFILERS.search(command))


def repeat_line(r: int, k: int, command: str) -> str:
    return f"{REPEAT_PREFIX}{r} of {k}: {command}"
