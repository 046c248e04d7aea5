"""How long a waiting job will wait, as a range that holds (issue 49).

A single figure was wrong whenever the queue did not look like recent history: every job costed at
its kind's median run (sub-second after a morning of quick tests) told the fifth of five students
"about 10 s" for a 176 s wait, and a running job past every recorded run was given "10 s left"
for ever. So the wait is a range, and the range says what it rests on:

- **From history.** A kind with enough recent runs that still describe what runs now: the queue is
  played forward a few hundred times (Monte Carlo), each running job ending as one of its kind's
  runs that lasted longer than it has so far (past all of them, by twice the longest), each job
  ahead taking a slot for a run drawn from its kind's latest runs by start (those still running
  included: in a rush the runs that ended first are the short ones), never past its own wall
  limit, plus the measured release-to-claim gap. Each play first redraws the runs themselves
  (a bootstrap): thirty runs tell the typical run only roughly, and that error is shared by every
  job in line. The range is the 2nd to 98th percentile of the start: as wide as the queue is
  uncertain, narrower as runs end and fewer jobs are ahead.
- **A guess.** A kind with too few runs, or runs that no longer describe it (a newer run, or a
  running job, more than twice the longest before it: this morning's quick tests say nothing about
  this afternoon's), is costed between nothing and its wall limit. The upper end is then a bound,
  not a statistic, and the estimate says it is a guess and why. A job that outlives its estimate
  therefore makes the range grow (to twice the longest run, then to its wall limit), never stay put.

Pure functions of what the caller read from the database (``views.QueueView``), so the rules are
tested without one; seeded, so the same queue gives the same answer each second.
"""

from __future__ import annotations

import heapq
import math
import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

MIN_RUNS = 5  # recent runs of a kind before its history is trusted for a range
STALE = 2.0  # a run (or a running job) this many times longer than every run before it: those runs are stale
LOW_Q, HIGH_Q = 0.02, 0.98  # the range: these quantiles of the simulated start
DRAWS = 200  # Monte Carlo plays of the queue (fewer for a long queue: the cost stays ~20,000 steps, ~0.1 s)
MAX_STEPS = 20_000
END_SLACK = 5.0  # s past a job's wall limit before its slot is free again (stop, upload, report)
DEFAULT_GAP = 1.0  # s from a slot freeing to the next job's claim, until history says otherwise
SEED = 49


@dataclass(frozen=True)
class Slotted:
    """A job that holds or will take a slot: running (``ran`` set) or waiting, in release order."""

    id: str
    kind: str
    wall: float  # its wall-time limit, s
    ran: float | None = None  # running: seconds since it was claimed
    alone: bool = False  # a ranked run: starts once the host is empty, then one after another
    yields: bool = False  # its owner has a job ahead: students with no turn yet who submit now go first


@dataclass(frozen=True)
class Newcomers:
    """Students who have had no turn yet and may still submit: fair share puts each of them before
    a job whose owner already has one in line or running. A second job told 'about 40 s' at a
    deadline waited three minutes behind them."""

    rate: float  # per second, as lately
    most: int  # at most this many: the students who could still come


@dataclass(frozen=True)
class Wait:
    """A waiting job's start, seconds from now: ``low``..``high``; ``mid`` the typical start (the
    old single figure, ``eta_seconds``); ``guess`` why it is a guess, None when history backs it."""

    low: float
    high: float
    mid: float
    guess: str | None = None


@dataclass(frozen=True)
class Kind:
    """What is known of one kind's recent runs: those that ended, and how long those still running
    have run (they last at least that); ``why`` it is a guess, None when trusted."""

    done: tuple[float, ...]  # sorted
    open: tuple[float, ...]
    why: str | None
    spread: float = 0.05  # a draw's spread around the run it copies (log scale): ``bandwidth``

    def ceiling(self) -> float:
        """Past this, a run says the history no longer describes the kind (``STALE``)."""
        return STALE * max(max(self.done, default=0.0), 0.5)

    def rest(self, ran: float, rng: random.Random) -> float:
        """How much longer a run that has lasted ``ran`` goes on: as one of the runs that lasted
        longer; past all of them, up to the ceiling (beyond it, the kind becomes a guess)."""
        longer = [d for d in self.done if d > ran]
        if longer:
            return (rng.choice(longer) - ran) * self.jitter(rng)
        return rng.uniform(0.0, max(self.ceiling() - ran, 0.0))

    def jitter(self, rng: random.Random) -> float:
        """A factor around 1: the next run is not exactly one of the last thirty."""
        return math.exp(rng.gauss(-(self.spread**2) / 2, self.spread))  # its mean is 1: no bias upwards

    def resampled(self, rng: random.Random) -> Kind:
        """The same runs drawn again with replacement, for one play of the queue: thirty runs
        tell the kind's typical run only roughly, and that error is shared by every job of the
        kind in line (drawing each job alone from the same thirty made a deep position's range
        far too sure of itself)."""
        if self.why is not None:
            return self
        both = [(d, True) for d in self.done] + [(r, False) for r in self.open]
        picked = [rng.choice(both) for _ in both]
        done = tuple(sorted(d for d, ended in picked if ended))
        if not done:
            return self
        return Kind(done, tuple(r for r, ended in picked if not ended), None, self.spread)

    def draw(self, rng: random.Random) -> float:
        """A next run: one of the recent ones, those still running included (the runs that ended
        first in a rush are the short ones; leaving the long ones out understated every wait)."""
        i = rng.randrange(len(self.done) + len(self.open))
        if i < len(self.done):
            return self.done[i] * self.jitter(rng)
        ran = self.open[i - len(self.done)]
        return ran + self.rest(ran, rng)


def fresh(recent: Sequence[float]) -> tuple[float, ...]:
    """The runs (newest first) that still describe the kind: those up to the newest one that
    lasted more than ``STALE`` times every run before it (the older ones are another workload)."""
    for i in range(len(recent) - 1):
        if recent[i] > STALE * max(max(recent[i + 1 :]), 0.5):
            return tuple(recent[: i + 1])
    return tuple(recent)


def known(kind: str, recent: Sequence[tuple[float, bool]]) -> Kind:
    """A kind's runs, trusted or not. ``recent``: its latest runs by start, newest first, each
    (seconds, ended): an ended run's length, or how long a running one has run so far."""
    kept = len(fresh([seconds for seconds, _ in recent]))
    done = tuple(sorted(seconds for seconds, ended in recent[:kept] if ended))
    open_ = tuple(seconds for seconds, ended in recent[:kept] if not ended)
    longest = STALE * max(max(done, default=0.0), 0.5)
    if done and any(ran > longest for ran in open_):
        return Kind(done, open_, f"a '{kind}' job running now has run more than twice as long as any recent '{kind}' run")
    if len(done) < MIN_RUNS:
        n = len(done)
        said = "no recent run" if n == 0 else f"only {n} recent run{'s' if n > 1 else ''}"
        if kept < len(recent):  # the older runs were cut off: say why they do not count
            return Kind(done, open_, f"'{kind}' runs now take over twice as long as before: {said} like them to go by")
        return Kind(done, open_, f"{said} of '{kind}' to go by")
    return Kind(done, open_, None, bandwidth(done))


def bandwidth(runs: Sequence[float]) -> float:
    """Silverman's rule on the runs' logarithms: as wide as the runs differ, narrower the more
    there are; at least 5 % (runs that all took 60 s do not promise the next one to the second)."""
    logs = [math.log(max(d, 0.1)) for d in runs]
    return max(0.05, 0.9 * statistics.pstdev(logs) * len(logs) ** -0.2) if len(logs) > 1 else 0.05


def quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile of sorted ``values`` (nearest rank, rounded outward at the ends)."""
    i = q * (len(values) - 1)
    return values[math.floor(i)] if q < 0.5 else values[math.ceil(i)]


def start_now(slots: int, running: int, waiting: Sequence[Slotted]) -> bool:
    """Whether every waiting job has an idle slot of its own: then, in every play of the queue,
    each starts after the release-to-claim gap and nothing else (no ranked run waiting for the
    host to empty, no student yielding to newcomers), so no play is needed. A fleet with room is
    the usual case; the plays cost ~0.1 s of CPU per submission with 100 jobs running, and a
    submission made them: 120 slots at 10 submissions a second took a server process's whole
    core (bench/fleet_sim.py, issue 52)."""
    return len(waiting) <= slots - running and not any(j.alone or j.yields for j in waiting)


def guesses(running: Sequence[str], waiting: Sequence[Slotted], whys: Mapping[str, str | None]) -> dict[str, str | None]:
    """Why each waiting job's estimate is a guess: the first kind that history does not describe
    (``whys``: per kind, ``Kind.why``) among the running jobs and those before it in line; None
    when every one of them is described."""
    out: dict[str, str | None] = {}
    ahead = next((whys[k] for k in running if whys[k] is not None), None)
    for j in waiting:
        out[j.id] = ahead
        ahead = ahead or whys[j.kind]
    return out


def estimate(
    slots: int,
    running: Sequence[Slotted],
    waiting: Sequence[Slotted],
    history: Mapping[str, Sequence[tuple[float, bool]]],
    gap: float = DEFAULT_GAP,
    newcomers: Newcomers | None = None,
) -> dict[str, Wait]:
    """Every waiting job's start as a range (see the module's docstring). ``waiting`` in release
    order (released ones first); ``history``: per kind, its latest runs by start, newest first,
    each (seconds, ended), the running ones included; ``newcomers``: who may still come before a
    job that ``yields`` (its upper end counts them arriving at their recent rate; its lower end,
    none)."""
    if slots <= 0 or not waiting:
        return {}
    kinds = {k: known(k, history.get(k, ())) for k in {j.kind for j in [*running, *waiting]}}
    rng = random.Random(SEED)
    draws = max(20, min(DRAWS, MAX_STEPS // (len(running) + len(waiting) + 1)))
    # each play of the queue twice: unknown parts at their least (for the low end) and at their
    # bound (for the high end); what history says is drawn once and shared by both
    lows: dict[str, list[float]] = {j.id: [] for j in waiting}
    highs: dict[str, list[float]] = {j.id: [] for j in waiting}
    guess = guesses([r.kind for r in running], waiting, {k: kind.why for k, kind in kinds.items()})
    if start_now(slots, len(running), waiting):  # what every play would give: the gap, for each of them
        return {j.id: Wait(low=gap, high=gap, mid=gap, guess=guess[j.id]) for j in waiting}
    for _ in range(draws):
        play = {k: kind.resampled(rng) for k, kind in kinds.items()}
        frees_lo: list[float] = []
        frees_hi: list[float] = []
        for r in running:
            lo, hi = _left(play[r.kind], r, rng)
            frees_lo.append(lo)
            frees_hi.append(hi)
        idle = max(slots - len(running), 0)
        frees_lo += [0.0] * idle
        frees_hi += [0.0] * idle
        alone_lo, alone_hi = max(frees_lo, default=0.0), max(frees_hi, default=0.0)
        heapq.heapify(frees_lo)
        heapq.heapify(frees_hi)
        came, arrives = 0, _next_arrival(0.0, newcomers, rng)
        for j in waiting:
            while j.yields and not j.alone and newcomers is not None and came < newcomers.most and arrives <= frees_hi[0] + gap:
                # a student with no turn yet submits before this job starts: theirs goes first
                start = max(heapq.heappop(frees_hi) + gap, arrives)
                heapq.heappush(frees_hi, start + _run(play[j.kind], j, rng)[1])
                came, arrives = came + 1, _next_arrival(arrives, newcomers, rng)
            lo, hi = _run(play[j.kind], j, rng)
            if j.alone:
                lows[j.id].append(alone_lo + gap)
                highs[j.id].append(alone_hi + gap)
                alone_lo += lo + gap
                alone_hi += hi + gap
                continue
            start_lo = heapq.heappop(frees_lo) + gap
            start_hi = heapq.heappop(frees_hi) + gap
            lows[j.id].append(start_lo)
            highs[j.id].append(start_hi)
            heapq.heappush(frees_lo, start_lo + lo)
            heapq.heappush(frees_hi, start_hi + hi)
    out: dict[str, Wait] = {}
    for j in waiting:
        lo_s, hi_s = sorted(lows[j.id]), sorted(highs[j.id])
        low, high = quantile(lo_s, LOW_Q), quantile(hi_s, HIGH_Q)
        mid = quantile(hi_s, 0.5) if guess[j.id] is None else high
        out[j.id] = Wait(low=low, high=max(high, low), mid=mid, guess=guess[j.id])
    return out


def _next_arrival(after: float, newcomers: Newcomers | None, rng: random.Random) -> float:
    """When the next newcomer submits (a Poisson process at their recent rate); never, without one."""
    if newcomers is None or newcomers.rate <= 0:
        return math.inf
    return after + rng.expovariate(newcomers.rate)


def _left(kind: Kind, job: Slotted, rng: random.Random) -> tuple[float, float]:
    """(least, most) a running job may still hold its slot, s, for one play of the queue."""
    ran = job.ran or 0.0
    bound = max(job.wall - ran, 0.0) + END_SLACK
    if kind.why is not None:  # nothing known of its kind: up to its wall limit
        return 0.0, bound
    left = min(kind.rest(ran, rng), bound)
    return left, left


def _run(kind: Kind, job: Slotted, rng: random.Random) -> tuple[float, float]:
    """(least, most) a waiting job will hold its slot, s, for one play of the queue."""
    bound = job.wall + END_SLACK
    if kind.why is not None:
        return 0.0, bound
    d = min(kind.draw(rng), bound)
    return d, d
