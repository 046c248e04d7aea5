"""Printing a job's output on the student's (or TA's) terminal: fast, in order, and harmless.

Job output is the program's, not ours: it is written with plain buffered writes (a batch at a
time, flushed at the end of each batch, so it is live and a 2-million-line log is not 2 million
writes), never read as rich markup, and cleaned of every terminal control but colours (SGR): an
OSC, a cursor move, a title change or a bell from a job cannot drive the reader's terminal.
"""

from __future__ import annotations

import re
import sys
from typing import TextIO

from raiprotocol.logwire import Batch

SGR = re.compile(r"\x1b\[[0-9;:]*m")
CONTROLS = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]?"  # CSI sequences (SGR is kept, below)
    r"|\x1b[\]PX^_][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"  # OSC, DCS, SOS, PM, APC strings
    r"|\x1b[ -/]*[0-~]?"  # any other escape
    r"|\x9b[0-?]*[ -/]*[@-~]?"  # 8-bit CSI
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]"  # C0 (but tab and newline) and C1 controls
)
SUSPECT = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def clean(text: str) -> str:
    """The text with every terminal control removed except colour (SGR) sequences."""
    if not SUSPECT.search(text):
        return text
    return CONTROLS.sub(lambda m: m.group() if SGR.fullmatch(m.group()) else "", text)


class LogPrinter:
    """Job lines to stdout and stderr in the order they were printed, also when both go to the
    same file or pipe: the other stream is flushed before switching."""

    def __init__(self, out: TextIO | None = None, err: TextIO | None = None):
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.color = self.out.isatty()
        self.star = "\x1b[1;36m✱\x1b[0m " if self.color else "✱ "
        self._last: TextIO | None = None

    def _to(self, stream: TextIO, text: str) -> None:
        if self._last is not None and self._last is not stream:
            self._last.flush()
        stream.write(text)
        self._last = stream

    def batches(self, batches: list[Batch]) -> None:
        for b in batches:
            text = clean(b.x)
            if b.s == "sys":
                self._to(self.out, "".join(f"{self.star}{line}\n" for line in text.split("\n")))
            else:
                self._to(self.err if b.s == "err" else self.out, text + "\n")
        self.flush()

    def system(self, text: str) -> None:
        """One of rai's own lines (the client's, not the job's)."""
        self._to(self.out, f"{self.star}{clean(text)}\n")
        self.flush()

    def flush(self) -> None:
        if self._last is not None:
            self._last.flush()
