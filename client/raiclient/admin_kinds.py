"""``raiclient admin kinds …``: the course's kinds, their deadlines and late policies, grade
rules and extensions (instructors; every change is audited on the server)."""

from __future__ import annotations

import typer
from rich.text import Text

from raiprotocol.models import ExtensionIn, GradeRule, KindIn

from . import console as cli
from .term import late_policy, print_kinds

kinds = typer.Typer(
    no_args_is_help=True, help="Submission kinds: openings, deadlines, late policies, grade rules, extensions.", rich_markup_mode=None
)
SERVER = typer.Option(None, "--server", envvar="RAI_SERVER")


def rule_words(name: str, g: GradeRule) -> str:
    """One kind's grade rule in a line; each rule's words made only for that rule (a pass rule has no
    op times: formatting them crashed 'kinds show', issue 49)."""
    if g.rule == "linear":
        how = f"op time {g.slow:g} s → 0, {g.fast:g} s → full" if g.slow is not None and g.fast is not None else "op time"
    elif g.rule == "stddev":
        how = f"{g.at_median:g} at the class median, {g.per_sd:+g} per standard deviation faster"
    else:
        how = "pass/fail on accuracy"
    gate = f"accuracy ≥ {g.threshold:g}" if g.threshold is not None else "accuracy ≥ the server's threshold"
    late = f", late: −{g.late_penalty:g} per started day" if g.late_penalty else ""
    return f"{name}: graded out of {g.points:g} by {how}; {gate}{late}"


@kinds.command("show")
def show(server: str | None = SERVER) -> None:
    """Every kind: opening, deadline, late policy, grade rule, extensions granted."""
    with cli.connected(server) as api:
        view = api.kinds()
    print_kinds(view.kinds, staff=True)
    for k in view.kinds:
        if k.grading:
            cli.show(Text(rule_words(k.name, k.grading)))


@kinds.command("set")
def set_kind(
    name: str = typer.Argument(..., help="the kind, e.g. m1 or final (created if new)"),
    opens: str | None = typer.Option(None, "--opens", help="ISO 8601, e.g. 2026-03-01T09:00-06:00 (no offset: UTC); 'none' clears"),
    due: str | None = typer.Option(None, "--due", help="the deadline, ISO 8601; 'none' clears"),
    policy: str | None = typer.Option(None, "--late-policy", help="refuse | mark (accept, mark late) | days (draw late days)"),
    late_hours: float | None = typer.Option(None, "--late-hours", help="the late window after each student's deadline; 0: no end"),
    grade: str | None = typer.Option(None, "--grade", help="pass | linear | stddev: the grade rule (with the options below)"),
    points: float = typer.Option(100, "--points", help="grade rule: full marks"),
    threshold: float | None = typer.Option(None, "--threshold", help="grade rule: the accuracy needed (default: the server's)"),
    slow: float | None = typer.Option(None, "--slow", help="linear: op time (s) that earns 0"),
    fast: float | None = typer.Option(None, "--fast", help="linear: op time (s) that earns full points"),
    at_median: float = typer.Option(0.8, "--at-median", help="stddev: the fraction earned at the class median"),
    per_sd: float = typer.Option(0.1, "--per-sd", help="stddev: the fraction more per standard deviation faster"),
    late_penalty: float = typer.Option(0.0, "--late-penalty", help="grade rule: the fraction lost per started day late"),
    server: str | None = SERVER,
) -> None:
    """Create a kind or change it: only the options given change."""
    fields: dict[str, object] = {
        k: v for k, v in (("opens", opens), ("due", due), ("late_policy", policy), ("late_hours", late_hours)) if v is not None
    }
    try:
        if grade is not None:
            fields["grading"] = GradeRule(
                rule=grade,
                points=points,
                threshold=threshold,
                slow=slow,
                fast=fast,
                at_median=at_median,
                per_sd=per_sd,
                late_penalty=late_penalty,
            )
        change = KindIn(**fields)
    except ValueError as exc:
        cli.fail(_first_error(exc))
        raise
    with cli.connected(server) as api:
        k = api.set_kind(name, change)
    due_text = f"due {k.due_at:%Y-%m-%d %H:%M} UTC, late: {late_policy(k)}" if k.due_at else "no deadline"
    opens_text = f"opens {k.opens_at:%Y-%m-%d %H:%M} UTC, " if k.opens_at else ""
    cli.say(f"'{k.name}': {opens_text}{due_text}" + (f"; graded by '{k.grading.rule}'" if k.grading else ""))


def _first_error(exc: ValueError) -> str:
    """pydantic's complaint about an option, in one line."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        e = errors()[0]
        where = ".".join(str(x) for x in e.get("loc", ()))
        return f"--{where.replace('_', '-')}: {e.get('msg')}" if where else str(e.get("msg"))
    return str(exc).splitlines()[0]


@kinds.command("remove")
def remove(name: str, server: str | None = SERVER) -> None:
    """Remove a kind that has no runs (one with runs: close it with --due instead)."""
    with cli.connected(server) as api:
        api.remove_kind(name)
    cli.say(f"'{name}' removed")


@kinds.command("extend")
def extend(
    kind: str,
    student: str | None = typer.Option(None, "--student", help="the student's username"),
    team: str | None = typer.Option(None, "--team", help="or a whole team"),
    until: str | None = typer.Option(None, "--until", help="the new deadline, ISO 8601"),
    hours: float | None = typer.Option(None, "--hours", help="or this many hours after the kind's deadline"),
    reason: str = typer.Option("", "--reason"),
    server: str | None = SERVER,
) -> None:
    """Give one student or one team a later deadline on KIND (replacing an earlier extension of theirs)."""
    try:
        body = ExtensionIn(username=student, team=team, until=until, hours=hours, reason=reason)
    except ValueError as exc:
        cli.fail(_first_error(exc))
        raise
    with cli.connected(server) as api:
        e = api.extend(kind, body)
    cli.say(f"'{e.kind}' is due for {e.username or 'team ' + (e.team or '')} at {e.due_at:%Y-%m-%d %H:%M} UTC")


@kinds.command("unextend")
def unextend(
    kind: str,
    student: str | None = typer.Option(None, "--student"),
    team: str | None = typer.Option(None, "--team"),
    server: str | None = SERVER,
) -> None:
    """End a student's or team's extension: the kind's own deadline applies again."""
    with cli.connected(server) as api:
        e = api.unextend(kind, student, team)
    cli.say(f"{e.username or 'team ' + (e.team or '')}'s extension of '{e.kind}' is gone")


@kinds.command("extensions")
def extensions(kind: str, server: str | None = SERVER) -> None:
    """The extensions granted on KIND."""
    from rich.table import Table

    with cli.connected(server) as api:
        rows = api.extensions(kind)
    table = Table("student or team", "due", "reason", "granted by", "when")
    for e in rows:
        table.add_row(
            Text(e.username or f"team {e.team}"),
            f"{e.due_at:%Y-%m-%d %H:%M} UTC",
            Text(e.reason),
            Text(e.granted_by),
            f"{e.granted_at:%Y-%m-%d %H:%M}",
        )
    cli.show(table)
