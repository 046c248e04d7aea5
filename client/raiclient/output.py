"""Printing on the student's (or TA's) terminal: the job's output and the client's own lines,
fast, in order, and harmless; with the standard library only (the submit path imports no rich).

Job output is the program's, not ours: it is written with plain buffered writes (a batch at a
time, flushed at the end of each batch, so it is live and a 2-million-line log is not 2 million
writes), never read as rich markup, and cleaned of every terminal control but colours (SGR): an
OSC, a cursor move, a title change or a bell from a job cannot drive the reader's terminal.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any, TextIO

from raiprotocol.logwire import Batch
from raiprotocol.markers import SYSTEM_MARK, disarm
from raiprotocol.resultview import printed_facts, results_view
from raiprotocol.safejson import escaped
from raiprotocol.sampling import median_of
from raiprotocol.states import JobState, exit_code_for
from raiprotocol.waits import wait_words

SGR = re.compile(r"\x1b\[[0-9;:]*m")
CONTROLS = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]?"  # CSI sequences (SGR is kept, below)
    r"|\x1b[\]PX^_][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"  # OSC, DCS, SOS, PM, APC strings
    r"|\x1b[ -/]*[0-~]?"  # any other escape
    r"|\x9b[0-?]*[ -/]*[@-~]?"  # 8-bit CSI
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]"  # C0 (but tab and newline) and C1 controls
)
SUSPECT = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


class PipeSafe:
    """A standard stream whose reader may go away (``raiclient submit | head -2``): once a write
    finds the pipe closed, the stream goes to /dev/null and the command carries on quietly, to end
    with the job's own status, never a BrokenPipeError traceback."""

    def __init__(self, stream: TextIO):
        self._stream = stream

    def _closed(self) -> None:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError):
            pass

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._closed()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._closed()
            with contextlib.suppress(BrokenPipeError, ValueError):
                self._stream.flush()  # what was buffered goes to /dev/null now

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def guard_pipes() -> None:
    """Make stdout and stderr pipe-safe (once, at the client's start)."""
    if not isinstance(sys.stdout, PipeSafe):
        sys.stdout = PipeSafe(sys.stdout)
    if not isinstance(sys.stderr, PipeSafe):
        sys.stderr = PipeSafe(sys.stderr)


def cell(text: object) -> str:
    """Job- or user-controlled text for one table cell or one line: every control removed
    (colours too: they would break the table), line breaks and tabs shown as \\n and \\t, bidi
    marks, overrides and isolates and line separators shown as \\u202e (as ``--json`` writes them):
    a right-to-left override in a student's message would reorder what a TA reads after it."""
    text = str(text).replace("\n", "\\n").replace("\t", "\\t")
    return escaped(CONTROLS.sub("", text) if SUSPECT.search(text) else text)


def clean(text: str, colour: bool = True) -> str:
    """The text with every terminal control removed except colour (SGR) sequences, and those too
    without ``colour`` (a log written to a file or a pipe, NO_COLOR, ``--color never``)."""
    if not SUSPECT.search(text):
        return text
    if not colour:
        return CONTROLS.sub("", text)
    return CONTROLS.sub(lambda m: m.group() if SGR.fullmatch(m.group()) else "", text)


# -- colour: --color auto|always|never, NO_COLOR (https://no-color.org) ------------------------

COLOR_MODES = ("auto", "always", "never")
_colour = {"mode": "auto"}


def set_color(mode: str) -> None:
    """The ``--color`` choice, for every stream this process writes (auto: a terminal's only)."""
    if mode not in COLOR_MODES:
        raise ValueError(f"--color takes {', '.join(COLOR_MODES)}, not {mode!r}")
    _colour["mode"] = mode


def coloured(stream: TextIO) -> bool:
    """Whether to write colour codes to ``stream``: ``--color always``/``never`` decide; in auto,
    a terminal gets them unless NO_COLOR is set (to anything) or TERM is dumb."""
    mode = _colour["mode"]
    if mode != "auto":
        return mode == "always"
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    return tty and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


class LogPrinter:
    """Job lines to stdout and stderr in the order they were printed, also when both go to the
    same file or pipe: the other stream is flushed before switching."""

    def __init__(self, out: TextIO | None = None, err: TextIO | None = None):
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.color = coloured(self.out)
        self.err_color = coloured(self.err)
        self.star = "\x1b[1;36m✱\x1b[0m " if self.color else "✱ "
        self._last: TextIO | None = None
        self.last = 0  # the number of the last line printed: where to resume

    def _to(self, stream: TextIO, text: str) -> None:
        if self._last is not None and self._last is not stream:
            self._last.flush()
        stream.write(text)
        self._last = stream

    def batches(self, batches: list[Batch]) -> None:
        for b in batches:
            self.last = max(self.last, b.last)
            text = clean(b.x, self.err_color if b.s == "err" else self.color)
            if b.s == "sys":
                self._to(self.out, "".join(f"{self.star}{line}\n" for line in text.split("\n")))
            else:
                if SYSTEM_MARK in text:  # a job line that starts with rai's mark is shown as the job's
                    text = "\n".join(map(disarm, text.split("\n")))
                self._to(self.err if b.s == "err" else self.out, text + "\n")
        self.flush()

    def system(self, text: str) -> None:
        """One of rai's own lines (the client's, not the job's)."""
        self._to(self.out, f"{self.star}{clean(text, self.color)}\n")
        self.flush()

    def flush(self) -> None:
        if self._last is not None:
            self._last.flush()


# -- the client's own lines ---------------------------------------------------------------------

STYLES = {"bold cyan": "1;36", "bold red": "1;31", "bold": "1", "green": "32", "red": "31", "yellow": "33"}
Part = str | tuple[str, str]


def styled(parts: tuple[Part, ...], stream: TextIO, one_line: bool = False) -> str:
    """Parts joined, each cleaned (ids, commands and messages come from users, never as markup),
    coloured only on a terminal; ``one_line``: line breaks shown as \\n (a job's failed command or
    message must not start a line of its own that looks like the client's)."""
    colour = coloured(stream)
    text = []
    for part in parts:
        words, style = (part, "") if isinstance(part, str) else part
        words = clean(words, colour)
        if one_line:
            words = words.replace("\n", "\\n")
        text.append(f"\x1b[{STYLES[style]}m{words}\x1b[0m" if colour and style in STYLES and words else words)
    return "".join(text)


def say(*parts: Part) -> None:
    """One of the client's own lines on stdout: parts are plain text or (text, style)."""
    sys.stdout.write(styled((("✱ ", "bold cyan"), *parts), sys.stdout, one_line=True) + "\n")
    sys.stdout.flush()


class LostConnection:
    """What the student is told while the server is away (the log stream lost, an upload cut): on
    a terminal one line that updates in place while it retries and ends as "reconnected"; on a file
    or a pipe one line at the loss and one at the recovery (not a line per try: a 5 s server restart
    had printed seven). ``lost`` and ``doing`` name the loss and the tries; each call says what a
    try does or what came back ("resuming after line 40")."""

    def __init__(self, stream: TextIO | None = None, lost: str = "connection lost", doing: str = "reconnecting"):
        self.lost, self.doing = lost, doing
        self.stream = stream or sys.stderr
        try:
            self.live = self.stream.isatty()
        except (AttributeError, ValueError):
            self.live = False
        self.since: float | None = None
        self.shown = False  # a live line is on screen, without its newline yet

    def _write(self, text: str, end: str) -> None:
        line = styled(((f"✱ {text}", "yellow"),), self.stream)
        self.stream.write(("\r\x1b[K" if self.live else "") + line + end)
        self.stream.flush()

    def retrying(self, resume: str, pause: float) -> None:
        first = self.since is None
        if first:
            self.since = time.monotonic()
        if self.live:
            lost_for = time.monotonic() - (self.since or 0)
            self._write(f"{self.lost} {lost_for:.0f} s ago; {self.doing} in {pause:.1f} s ({resume})…", "")
            self.shown = True
        elif first:
            self._write(f"{self.lost}; {self.doing} ({resume})…", "\n")

    def back(self, resume: str) -> None:
        if self.since is None:
            return
        self._write(f"reconnected after {time.monotonic() - self.since:.1f} s; {resume}", "\n")
        self.since, self.shown = None, False

    def end(self) -> None:
        """Before another line: finish the live one."""
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()
            self.shown = False


def error(message: str) -> None:
    sys.stderr.write(styled((("✱ error: ", "bold red"), message), sys.stderr) + "\n")
    sys.stderr.flush()


def local(at: datetime, seconds: bool = True, year: bool = True) -> str:
    """A server timestamp (UTC) as the reader's local time, to the second: 2026-11-24 09:04:52 CET."""
    fmt = ("%Y-%m-%d " if year else "%m-%d ") + ("%H:%M:%S" if seconds else "%H:%M")
    if at.tzinfo is None:  # the server sends UTC; a naive one is read as UTC too
        from datetime import timezone

        at = at.replace(tzinfo=timezone.utc)
    here = at.astimezone()
    return here.strftime(fmt) + (f" {here.strftime('%Z')}" if seconds else "")


def kib(n: int) -> str:
    if n < 1024:
        return f"{n} bytes"
    return f"{n / 1024:,.0f} KiB" if n < 10 * 1024**2 else f"{n / 1024**2:,.1f} MiB"


# -- a job's end, from its wire form (a JobOut as JSON) ---------------------------------------------


def waits(status: Mapping[str, Any]) -> str | None:
    """A waiting job's estimate in words (issue 49: a range, and whether it is a guess), from a
    JobOut as JSON; an older server's lone ``eta_seconds`` as 'about N s'."""
    return wait_words(status.get("eta_low"), status.get("eta_high"), status.get("eta_guess"), status.get("eta_seconds"))


def queued_line(status: Mapping[str, Any]) -> str:
    said = waits(status)
    return f"Waiting in queue: position {status.get('position')}" + (f", {said}" if said else "")


class WaitNotes:
    """When a waiting job's status is worth a line: its position changed, its estimate's upper
    end moved by more than a quarter (and 10 s), or 30 s passed since the last line (so a student
    sees it waits)."""

    def __init__(self, position: int | None = None, eta: float | None = None):
        self.position, self.eta, self.said = position, eta, time.monotonic()

    def line(self, status: Mapping[str, Any]) -> str | None:
        if status.get("state") != "queued" or not status.get("position"):
            return None
        position = status["position"]
        eta = status.get("eta_high") if status.get("eta_high") is not None else status.get("eta_seconds")
        moved = eta is not None and (self.eta is None or abs(eta - self.eta) > max(10.0, 0.25 * self.eta))
        if position == self.position and not moved and time.monotonic() - self.said < 30:
            return None
        self.position, self.eta, self.said = position, eta, time.monotonic()
        return queued_line(status)


def detached_lines(job_id: str, after: int = 0) -> list[str]:
    """What Ctrl-C says: short lines, each command whole on its own (one 150-column line wrapped
    mid-command in an 80-column terminal, issue 49)."""
    resume = f" --after {after}" if after else ""
    return ["Detached; the job goes on.", f"  Reattach: raiclient logs {job_id} --follow{resume}", f"  Cancel:   raiclient cancel {job_id}"]


def quoted(command: str) -> str:
    """A command in quotes that read right around it: '…', or "…" when it holds a ' itself."""
    if "'" not in command:
        return f"'{command}'"
    if '"' not in command:
        return f'"{command}"'
    return f"the command {command}"


def print_results(results: Mapping[str, Any] | None) -> None:
    """The parsed results (Op Time, Correctness, …) as a small two-column table."""
    r = results_view(results)
    rows = [(f.label, f"{f.value} ({f.note})" if f.note else f.value) for f in printed_facts(r)]
    m = r.measured
    if m is not None:  # a ranked run: the service's own figures rank; the printed ones above are shown only
        measured: list[tuple[str, str]] = []
        if m.problem:
            measured.append(("Not ranked", m.problem))
        if m.op_time is not None:
            how = {"op": "the operations' time, rai's clock", "kernels": "GPU time of every kernel, ncu"}.get(m.measure or "", "wall time")
            measured.append(
                (
                    "Op Time",
                    f"{m.op_time:g} s (median of {median_of(len(m.runs), m.passes)}, {how}; spread {m.spread or 0:g} s)",
                )
            )
        if m.measure == "op" and m.error is not None:
            measured.append(("Checked", f"the outputs agree with the course's reference (largest difference {m.error:.2g})"))
        elif m.accuracy is not None:
            measured.append(("Accuracy", f"{m.accuracy:g} (checked by the server)"))
        measured += [("Flagged", flag) for flag in m.flags]
        rows = [(f"Printed {name}", value) for name, value in rows]
        rows = [(f"Measured {name}" if name in ("Op Time", "Accuracy", "Checked") else name, value) for name, value in measured] + rows
        rows.append(("Build file", f"the course's, version {m.course_version} (yours was not used)"))
    if not rows:
        return
    width = max(len(name) for name, _ in rows) + 2
    colour = coloured(sys.stdout)
    sys.stdout.write("Results\n" + "".join(f"  {name.ljust(width)}{clean(value, colour)}\n" for name, value in rows))
    sys.stdout.flush()


def _duration(job: Mapping[str, Any]) -> float | None:
    if job.get("started_at") and job.get("finished_at"):
        return (datetime.fromisoformat(job["finished_at"]) - datetime.fromisoformat(job["started_at"])).total_seconds()
    return None


def finish(job: Mapping[str, Any], server: str) -> int:
    """The job's results and how it ended; returns the client's exit status."""
    print_results(job.get("results"))
    if job.get("has_build"):
        say(f"Build folder: {server}/api/v1/jobs/{job['id']}/build.tar.gz  (raiclient download {job['id']})")
    state = JobState(job["state"])
    duration = _duration(job)
    took = f" in {duration:.1f} s" if duration is not None else ""
    if state is JobState.succeeded:
        say("Job ", ("succeeded", "green"), took)
    elif state is JobState.failed:
        what = f": {quoted(job['failed_command'])} exited with {job.get('exit_code')}" if job.get("failed_command") else ""
        say("Job ", ("failed", "red"), took + what)
    else:
        say("Job ", (state.value.replace("_", " "), "red"), took + (f": {job['message']}" if job.get("message") else ""))
    return exit_code_for(state, job.get("exit_code"))
