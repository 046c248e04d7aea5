"""A waiting job's estimated wait in words, the same in the client, the web pages and the API's
queue rows (issue 49: a range, never a lone "about 10 s", and a guess says it is one). Standard
library only: the one-file client imports it."""

from __future__ import annotations


def span(seconds: float) -> str:
    """A length as the pages write it: 45 s, 3 min 5 s, 1 h 2 min."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min" + (f" {s % 60} s" if s % 60 else "")
    return f"{s // 3600} h" + (f" {s % 3600 // 60} min" if s % 3600 // 60 else "")


def between(low: float, high: float) -> str:
    """``low``..``high`` with the unit said once where both are under a minute: 25–40 s."""
    if round(low) == round(high):
        return span(high)
    if high < 60:
        return f"{int(round(low))}–{span(high)}"
    return f"{span(low)} – {span(high)}"


def wait_words(low: float | None, high: float | None, guess: str | None = None, single: float | None = None) -> str | None:
    """'about 25–40 s', 'up to 1 h 5 min, a guess: no recent run of 'dev' to go by', 'starting
    now'; from an older server with only ``single`` (``eta_seconds``): 'about 40 s'. None: no
    estimate (no live worker serves the queue)."""
    if high is None or low is None:
        return f"about {span(single)}" if single else None
    if high <= 5 and low <= 0:  # a free slot, or claimed already (rounded to 5 s)
        return "starting now"
    if guess:
        return (f"up to {span(high)}" if low <= 0 else f"{between(low, high)}") + f", a guess: {guess}"
    return f"about {between(low, high)}"
