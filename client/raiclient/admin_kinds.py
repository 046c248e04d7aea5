"""``raiclient admin kinds …``: the course's kinds, their deadlines and late policies, grade
rules and extensions (instructors; every change is audited on the server). Each function runs one
command as ``commands_admin.py`` defines it."""

from __future__ import annotations

import argparse
import sys

from raiprotocol.graderules import PARAMS, rule_words
from raiprotocol.models import ExtensionIn, GradeRule, KindIn

from . import staff as cli
from . import table
from .output import cell, say
from .session import fail
from .term import late_policy, print_kinds, wrapped


def show(args: argparse.Namespace) -> int:
    """Every kind: opening, deadline, late policy, grade rule, extensions granted."""
    with cli.connected(args.server) as api:
        view = api.kinds()
    print_kinds([k.model_dump(mode="json") for k in view.kinds], staff=True)
    for k in view.kinds:
        if k.grading:
            sys.stdout.write(wrapped(cell(rule_words(k.name, k.grading))))
    return 0


def set_kind(args: argparse.Namespace) -> int:
    """Create a kind or change it: only the options given change."""
    given = (("opens", args.opens), ("due", args.due), ("late_policy", args.policy), ("late_hours", args.late_hours))
    fields: dict[str, object] = {k: v for k, v in given if v is not None}
    try:
        if args.grade is not None:  # the numbers given; the others keep GradeRule's defaults
            numbers = {name: getattr(args, name) for name in PARAMS if getattr(args, name) is not None}
            fields["grading"] = GradeRule(rule=args.grade, **numbers)
        change = KindIn(**fields)
    except ValueError as exc:
        fail(_first_error(exc))
        raise
    with cli.connected(args.server) as api:
        k = api.set_kind(args.name, change)
    due_text = f"due {k.due_at:%Y-%m-%d %H:%M} UTC, late: {late_policy(k.model_dump(mode='json'))}" if k.due_at else "no deadline"
    opens_text = f"opens {k.opens_at:%Y-%m-%d %H:%M} UTC, " if k.opens_at else ""
    say(f"'{k.name}': {opens_text}{due_text}" + (f"; graded by '{k.grading.rule}'" if k.grading else ""))
    return 0


def _first_error(exc: ValueError) -> str:
    """pydantic's complaint about an option, in one line."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        e = errors()[0]
        where = ".".join(str(x) for x in e.get("loc", ()))
        return f"--{where.replace('_', '-')}: {e.get('msg')}" if where else str(e.get("msg"))
    return str(exc).splitlines()[0]


def remove(args: argparse.Namespace) -> int:
    with cli.connected(args.server) as api:
        api.remove_kind(args.name)
    say(f"'{args.name}' removed")
    return 0


def extend(args: argparse.Namespace) -> int:
    """Give one student or one team a later deadline on KIND (replacing an earlier extension of theirs)."""
    try:
        body = ExtensionIn(username=args.student, team=args.team, until=args.until, hours=args.hours, reason=args.reason)
    except ValueError as exc:
        fail(_first_error(exc))
        raise
    with cli.connected(args.server) as api:
        e = api.extend(args.kind, body)
    say(f"'{e.kind}' is due for {e.username or 'team ' + (e.team or '')} at {e.due_at:%Y-%m-%d %H:%M} UTC")
    return 0


def unextend(args: argparse.Namespace) -> int:
    with cli.connected(args.server) as api:
        e = api.unextend(args.kind, args.student, args.team)
    say(f"{e.username or 'team ' + (e.team or '')}'s extension of '{e.kind}' is gone")
    return 0


def extensions(args: argparse.Namespace) -> int:
    with cli.connected(args.server) as api:
        rows = api.extensions(args.kind)
    table.show(
        ("student or team", "due", "reason", "granted by", "when"),
        [
            (
                cell(e.username or f"team {e.team}"),
                f"{e.due_at:%Y-%m-%d %H:%M} UTC",
                cell(e.reason),
                cell(e.granted_by),
                f"{e.granted_at:%Y-%m-%d %H:%M}",
            )
            for e in rows
        ],
        box=True,
    )
    return 0
