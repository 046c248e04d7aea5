"""The upload's progress on a terminal, on the standard library (the one-file client has no rich):
one line redrawn at most ten times a second, cleared when the upload ends (``submit`` then says
how much went up and how fast)."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from .output import styled

WIDTH = 24  # the bar's cells


class UploadBar:
    """``✱ Uploading [#########               ] 15.0/40.0 MiB  4.1 MB/s``"""

    def __init__(self, total: int, stream: TextIO | None = None):
        self.total, self.sent = total, 0
        self.stream = stream or sys.stdout
        self.started = self.drawn = time.monotonic()

    def advance(self, n: int) -> None:
        self.sent += n
        now = time.monotonic()
        if now - self.drawn >= 0.1 or self.sent >= self.total:
            self.drawn = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        cells = min(WIDTH, WIDTH * self.sent // max(self.total, 1))
        rate = self.sent / max(now - self.started, 1e-3) / 1024**2
        words = (
            f"Uploading [{'#' * cells}{' ' * (WIDTH - cells)}] {self.sent / 1024**2:.1f}/{self.total / 1024**2:.1f} MiB  {rate:.1f} MB/s"
        )
        self.stream.write("\r\x1b[K" + styled((("✱ ", "bold cyan"), words), self.stream))
        self.stream.flush()

    def clear(self) -> None:
        self.stream.write("\r\x1b[K")
        self.stream.flush()
