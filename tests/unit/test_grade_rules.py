"""A kind's grade rules are declared once (issue 47: raiprotocol.graderules for names, words and
numbers; raiserver.grading.rules for the arithmetic): the model, the CLI's options, the web form and
the grade sheet all follow. A rule added there alone is offered and computed everywhere."""

from __future__ import annotations

import argparse

import pytest

from raiclient import commands
from raiprotocol import graderules
from raiprotocol.graderules import PARAMS, RULES, Rule, rule_words
from raiprotocol.models import GradeRule
from raiserver.api.pages.term import _rule_form
from raiserver.errors import Invalid
from raiserver.grading import rules
from raiserver.grading.rules import ARITHMETIC, Arithmetic, check_rule, class_times, fraction, needs_op_time


def _set_help() -> str:
    """`raiclient admin kinds set --help`, from the parser as the client builds it now."""
    parser = commands.build()
    for name in ("admin", "kinds", "set"):
        parser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[name]
    return parser.format_help()


def test_every_number_is_a_field_of_the_model_and_every_rule_has_its_arithmetic():
    assert set(PARAMS) == set(GradeRule.model_fields) - {"rule"}
    assert all(set(rule.params) <= set(PARAMS) for rule in RULES.values())
    assert set(ARITHMETIC) == set(RULES)
    form = _rule_form().model_fields
    assert set(PARAMS) <= set(form) and {"kind", "rule", "csrf"} <= set(form)
    text = _set_help()
    for name in PARAMS:
        assert f"--{name.replace('_', '-')}" in text, name
    assert " | ".join(RULES) in " ".join(text.split())


def test_a_rule_declared_there_alone_is_offered_checked_and_computed(monkeypatch):
    monkeypatch.setitem(graderules.RULES, "half", Rule("half marks for any correct run", (), False, lambda g: "half of it"))
    monkeypatch.setitem(rules.ARITHMETIC, "half", Arithmetic(lambda t, rule, c: 0.5))
    rule = GradeRule(rule="half", points=10)
    check_rule(rule)
    assert not needs_op_time(rule) and class_times(rule, "m1", []) is None and fraction(rule, 9.0, None) == 0.5
    assert rule_words("m1", rule) == "m1: graded out of 10 by half of it; accuracy ≥ the server's threshold"
    assert "pass | linear | stddev | half" in " ".join(_set_help().split())


def test_a_number_of_another_rule_is_refused_in_one_line():
    with pytest.raises(Invalid, match=r"^--slow belongs to the linear rule, not 'pass'$"):
        check_rule(GradeRule(rule="pass", slow=0.2))
    with pytest.raises(Invalid, match=r"^--slow and --fast belong to the linear rule, not 'stddev'$"):
        check_rule(GradeRule(rule="stddev", slow=0.2, fast=0.1))
    with pytest.raises(ValueError, match="no grade rule 'curve'; one of: pass, linear, stddev"):
        GradeRule(rule="curve")
