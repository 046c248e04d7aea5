"""What a ranked number is the median of, in words, the same on the job's page and in the client
(issue 46: ``ranked.passes``). Standard library only: the one-file client imports it."""

from __future__ import annotations


def median_of(samples: int, passes: int) -> str:
    """``samples`` totals of ``passes`` per timed run: "5 timed runs", "25 passes (5 timed runs of 5)"."""
    if passes <= 1:
        return f"{samples} timed run{'s' * (samples != 1)}"
    runs = samples // passes
    return f"{samples} passes ({runs} timed run{'s' * (runs != 1)} of {passes})"
