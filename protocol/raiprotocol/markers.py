"""The markers in a job's log that the worker writes and the server reads back: which command
ran (``Running: …``), repeated timing runs (``Repeat r of k: …``), and the program's ``Op Time:``.

What counts as a timing run: a command that printed ``Op Time:`` and did not run under a profiler,
since ncu, nsys, nvprof and compute-sanitizer inflate the timings they observe. The server reads
``Op Time:`` itself (raiserver.results, on a linear-time engine)."""

from __future__ import annotations

import re

# on a command as one_line shows it: an escaped line break (\\n) separates words like a space
PROFILERS = re.compile(r"(^|[\s/;&|(]|\\[nrt])(ncu|nsys|nvprof|nv-nsight-cu-cli|compute-sanitizer|cuda-memcheck)(\s|$|\\[nrt])")
SYSTEM_MARK = "✱"  # how clients show rai's own lines ("✱ Running: …"); job output never starts with it
REPEAT_PREFIX = "Repeat "  # "Repeat 2 of 3: <command>" in the log
RUNNING_PREFIX = "Running:"  # "Running: <command>" in the log, before each build command


_ESCAPES = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))} | {0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t"}
_SGR = re.compile(r"\x1b\[[0-9;:]*m")


def one_line(text: str) -> str:
    """Text for one of rai's own log lines: control characters escaped (``\\n``, ``\\x1b``), so a
    newline in a build command or a message cannot make a second, forged, line of rai's."""
    return text.translate(_ESCAPES)


def disarm(line: str) -> str:
    """One line of a job's output as shown beside rai's lines: if it starts (colours aside) with
    rai's mark, a backslash goes before it, so '✱ Job succeeded' printed by a job cannot pass for
    the client's own line."""
    if SYSTEM_MARK not in line or not _SGR.sub("", line).startswith(SYSTEM_MARK):
        return line
    return "\\" + line


def running_line(command: str) -> str:
    return f"{RUNNING_PREFIX} {one_line(command)}"


def command_of(line: str) -> str | None:
    """The command a ``running_line`` announces, or None for any other line."""
    return line.removeprefix(RUNNING_PREFIX).strip() if line.startswith(RUNNING_PREFIX) else None


def is_profiled(command: str) -> bool:
    """Read on the command as the log shows it (one_line), by the worker and the server alike."""
    return bool(PROFILERS.search(one_line(command)))


def repeat_line(r: int, k: int, command: str) -> str:
    return f"{REPEAT_PREFIX}{r} of {k}: {one_line(command)}"
