"""The markers in a job's log that the worker writes and the server reads back: which command
ran (``Running: …``), repeated timing runs (``Repeat r of k: …``), and the program's ``Op Time:``.

What counts as a timing run: a command that printed ``Op Time:`` and did not run under a profiler,
since ncu, nsys, nvprof and compute-sanitizer inflate the timings they observe."""

from __future__ import annotations

import re

OP_TIME = re.compile(r"Op Time:\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)")
PROFILERS = re.compile(r"(^|[\s/;&|(])(ncu|nsys|nvprof|nv-nsight-cu-cli|compute-sanitizer|cuda-memcheck)(\s|$)")
REPEAT_PREFIX = "Repeat "  # "Repeat 2 of 3: <command>" in the log
RUNNING_PREFIX = "Running:"  # "Running: <command>" in the log, before each build command


def running_line(command: str) -> str:
    return f"{RUNNING_PREFIX} {command}"


def command_of(line: str) -> str | None:
    """The command a ``running_line`` announces, or None for any other line."""
    return line.removeprefix(RUNNING_PREFIX).strip() if line.startswith(RUNNING_PREFIX) else None


def is_profiled(command: str) -> bool:
    return bool(PROFILERS.search(command))


def repeat_line(r: int, k: int, command: str) -> str:
    return f"{REPEAT_PREFIX}{r} of {k}: {command}"
