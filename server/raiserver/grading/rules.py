"""Each grade rule's arithmetic (issue 47): the fraction of the points a run earns by its op time,
whether it grades against the class, and what makes a rule of it unusable. The rules' names, words
and numbers are ``raiprotocol.graderules``'; a new rule is a line there and its arithmetic here.

Every fraction falls (or stays) as the op time grows: a team's best run is then always among its
runs that no earlier run beats on both op time and penalty (``grades``' front)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from raiprotocol.graderules import COMMON, PARAMS, RULES, scope
from raiprotocol.models import GradeRule
from raiserver.errors import Invalid


class ClassTimes(NamedTuple):
    """The class's op times a rule may grade against: the median and standard deviation of each
    team's fastest valid run."""

    median: float
    sd: float


@dataclass(frozen=True)
class Arithmetic:
    fraction: Callable[[float, GradeRule, ClassTimes | None], float]  # of the points, for an op time in seconds
    against_class: bool = False  # needs ClassTimes
    check: Callable[[GradeRule], None] = lambda rule: None  # raises Invalid, in one line, for a rule it cannot compute


def _linear_check(rule: GradeRule) -> None:
    if rule.slow is None or rule.fast is None:
        raise Invalid("the linear rule needs --slow (the op time, in seconds, that earns 0) and --fast (full points)")
    if rule.fast >= rule.slow:
        raise Invalid(f"the linear rule's --fast ({rule.fast:g} s) must be faster (smaller) than --slow ({rule.slow:g} s)")


def _linear(t: float, rule: GradeRule, _: ClassTimes | None) -> float:
    slow, fast = float(rule.slow or 0), float(rule.fast or 0)
    return min(1.0, max(0.0, (slow - t) / (slow - fast)))


def _stddev(t: float, rule: GradeRule, c: ClassTimes | None) -> float:
    assert c is not None
    return min(1.0, max(0.0, rule.at_median + rule.per_sd * (c.median - t) / c.sd))


ARITHMETIC: dict[str, Arithmetic] = {
    "pass": Arithmetic(lambda t, rule, c: 1.0),
    "linear": Arithmetic(_linear, check=_linear_check),
    "stddev": Arithmetic(_stddev, against_class=True),
}
assert set(ARITHMETIC) == set(RULES), "every rule of raiprotocol.graderules needs its arithmetic here"


def check_rule(rule: GradeRule) -> None:
    """A rule that can be computed, or one clear line: its own check, and no number given that only
    another rule reads (of those with no default: the others cannot be told from their defaults)."""
    ARITHMETIC[rule.rule].check(rule)
    own = (*COMMON, *RULES[rule.rule].params)
    stray = [p for p in PARAMS if p not in own and GradeRule.model_fields[p].default is None and getattr(rule, p) is not None]
    if stray:
        names = " and ".join(f"--{p.replace('_', '-')}" for p in stray)
        raise Invalid(f"{names} {'belong' if len(stray) > 1 else 'belongs'} to the {scope(stray[0])} rule, not '{rule.rule}'")


def class_times(rule: GradeRule, kind: str, fastest: Sequence[float]) -> ClassTimes | None:
    """What the rule grades against, from each team's fastest valid run (None: a rule that does not)."""
    if not ARITHMETIC[rule.rule].against_class:
        return None
    if len(fastest) < 2:
        raise Invalid(f"the {rule.rule} rule needs valid runs from at least 2 teams; '{kind}' has {len(fastest)}")
    median, sd = statistics.median(fastest), statistics.pstdev(fastest)
    if sd == 0 or not math.isfinite(sd):
        raise Invalid(f"the {rule.rule} rule cannot grade '{kind}': every team's op time is the same ({median:g} s)")
    return ClassTimes(median, sd)


def fraction(rule: GradeRule, op_time: float, c: ClassTimes | None) -> float:
    return ARITHMETIC[rule.rule].fraction(op_time, rule, c)


def needs_op_time(rule: GradeRule) -> bool:
    return RULES[rule.rule].op_time
