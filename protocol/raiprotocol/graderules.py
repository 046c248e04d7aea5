"""A kind's grade rules, declared once (issue 47): each rule's name, what it does in a line, the
parameters it reads, whether it needs an op time, and how it reads in words. `raiclient admin
kinds set --grade`'s options, the web form on /kinds and `raiclient admin kinds show` are made from
these; ``raiprotocol.models.GradeRule`` holds the values (a field per parameter, with its bounds) and
the server's ``grading/grades.py`` the arithmetic (a fraction per rule). So a new rule is a line here
and its fraction there; a new parameter is also its field on ``GradeRule``.

On the standard library: the client builds its commands from it, in ``raiclient.pyz`` too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple


class Param(NamedTuple):
    """One of a rule's numbers: ``GradeRule``'s field of that name."""

    says: str  # the option's help and the form's label, after the rule's name ("linear: …")
    metavar: str
    shown: str = ""  # what the web form holds before it is changed (the model's default, as text)


class Rule(NamedTuple):
    says: str  # the form's choice, and the CLI's list of rules
    params: tuple[str, ...]  # its own numbers, beside COMMON's
    op_time: bool  # a run needs an op time to be graded by it
    how: Callable[[Any], str]  # its grading in words, from a GradeRule (or anything with its fields)


# every rule's numbers
COMMON = ("points", "threshold", "late_penalty")
PARAMS: dict[str, Param] = {
    "points": Param("full marks", "P", "100"),
    "threshold": Param("the accuracy needed (none given: the server's)", "A"),
    "slow": Param("op time (s) that earns 0", "S"),
    "fast": Param("op time (s) that earns full points", "S"),
    "at_median": Param("the fraction earned at the class median", "F", "0.8"),
    "per_sd": Param("the fraction more per standard deviation faster", "F", "0.1"),
    "late_penalty": Param("the fraction lost per started day late", "F", "0"),
}


def _linear(g: Any) -> str:
    return f"op time {g.slow:g} s → 0, {g.fast:g} s → full" if g.slow is not None and g.fast is not None else "op time"


def _stddev(g: Any) -> str:
    return f"{g.at_median:g} at the class median, {g.per_sd:+g} per standard deviation faster"


RULES: dict[str, Rule] = {
    "pass": Rule("pass: accuracy reaches the threshold", (), False, lambda g: "pass/fail on accuracy"),
    "linear": Rule("linear between two op times", ("slow", "fast"), True, _linear),
    "stddev": Rule("standard deviations from the class median", ("at_median", "per_sd"), True, _stddev),
}


def scope(param: str) -> str:
    """Which rules read a parameter, as its help and label start: "linear", or "grade rule" for every rule's."""
    return "/".join(name for name, rule in RULES.items() if param in rule.params) or "grade rule"


def label(param: str) -> str:
    """A parameter as the CLI's help and the web form say it: "linear: op time (s) that earns 0"."""
    return f"{scope(param)}: {PARAMS[param].says}"


def rule_words(kind: str, g: Any) -> str:
    """One kind's grade rule in a line (``kinds show``); each rule's words made only from its own
    numbers (a pass rule has no op times: formatting them crashed 'kinds show', issue 49)."""
    how = RULES[g.rule].how(g) if g.rule in RULES else g.rule
    gate = f"accuracy ≥ {g.threshold:g}" if g.threshold is not None else "accuracy ≥ the server's threshold"
    late = f", late: −{g.late_penalty:g} per started day" if g.late_penalty else ""
    return f"{kind}: graded out of {g.points:g} by {how}; {gate}{late}"
