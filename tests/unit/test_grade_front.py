"""A kept grade sheet holds only the runs that may count (issue 52: ``grades.front``): whatever
runs come after, and whatever the class median, the best run it finds is the one every run gives."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

from raiprotocol.graderules import RULES
from raiprotocol.models import GradeRule
from raiserver.grading.grades import Graded, RunRef, front
from raiserver.grading.rules import ClassTimes, fraction, needs_op_time

T0 = datetime(2026, 9, 1, tzinfo=timezone.utc)


def run(rng: random.Random, i: int) -> Graded:
    g = Graded(
        RunRef(f"J{i:025d}", T0 + timedelta(minutes=rng.randint(0, 500))), rng.choice([None, *[rng.uniform(0.01, 1)] * 5]), 1.0, True, None
    )
    g.penalty = rng.choice([0.0, 0.0, 0.0, 0.1, 0.2])
    if rng.random() < 0.2 or (g.op_time is None and rng.random() < 0.5):
        g.reason = "accuracy 0.5 is below 0.8"
    return g


def _fraction(g: Graded, rule: GradeRule, median: float, sd: float) -> float:
    return fraction(rule, float(g.op_time or 0), ClassTimes(median, sd))


def best(runs: list[Graded], rule: GradeRule, median: float, sd: float) -> str | None:
    """As the sheet chose before fronts: the most points, the earliest of equals, over every valid run."""
    valid = [
        g
        for g in sorted(runs, key=lambda g: (g.job.created_at, g.job.id))
        if g.valid and (not needs_op_time(rule) or g.op_time is not None)
    ]
    if not valid:
        return None
    return max(valid, key=lambda g: (max(0.0, _fraction(g, rule, median, sd) - g.penalty), -g.job.created_at.timestamp())).job.id


def test_the_front_keeps_every_run_that_may_count_and_composes():
    rng = random.Random(52)
    rules = [GradeRule(rule="pass"), GradeRule(rule="linear", slow=0.8, fast=0.1), GradeRule(rule="stddev", at_median=0.8, per_sd=0.3)]
    assert {r.rule for r in rules} == set(RULES)  # a new rule must keep the front (its fraction falls as the op time grows)
    for trial in range(300):
        runs = [run(rng, trial * 100 + i) for i in range(rng.randint(1, 40))]
        cut = rng.randint(0, len(runs))
        kept = front(front(runs[:cut]) + runs[cut:])
        assert [g.job.id for g in kept] == [g.job.id for g in front(runs)]
        for rule in rules:
            median, sd = rng.uniform(0.05, 0.6), rng.uniform(0.01, 0.3)
            usable = [g for g in kept if not needs_op_time(rule) or g.op_time is not None]
            chosen = max(
                usable, key=lambda g: (max(0.0, _fraction(g, rule, median, sd) - g.penalty), -g.job.created_at.timestamp()), default=None
            )
            assert (chosen.job.id if chosen else None) == best(runs, rule, median, sd), (trial, rule.rule)
