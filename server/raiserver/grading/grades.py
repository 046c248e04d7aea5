"""A kind's grades (issue 36): one row per student on the roster, by the kind's rule.

Each run of the kind is graded alone: it must have succeeded and reach the rule's accuracy; then
``pass`` gives full points, ``linear`` points between two op times, ``stddev`` points by standard
deviations from the class median (each team's best counting run makes the class); a run marked
late loses ``late_penalty`` per started day, one outside the student's window (refused kinds,
staff-submitted) earns nothing. A team's grade is its best run's, and every member gets it; a
student with no valid run gets 0 and the reason. Ranked kinds grade only what the service itself
measured; other kinds what the program printed (the sheet says which)."""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session, joinedload, load_only

from raiprotocol.graderules import RULES
from raiprotocol.models import GradeRule, JobState
from raiserver.access.permissions import is_student
from raiserver.config import Settings
from raiserver.errors import Invalid
from raiserver.grading.keeping import one_maker
from raiserver.grading.kinds import Deadlines, Person, Personal, aware, in_words, kind_row, late_days_for, rule_of
from raiserver.grading.rules import class_times, fraction, needs_op_time
from raiserver.store.db import SETTLE, utcnow
from raiserver.store.summaries import figures_of
from raiserver.store.tables import Job, User


@dataclass(frozen=True, slots=True)
class RunRef:
    """Which run a grade comes from: all a judged run keeps of its row (the judged runs of a kind stay
    in each server process's memory: ``Sheet``; whole rows of a term's runs took 850 MB)."""

    id: str
    created_at: datetime


@dataclass(slots=True)  # a term's runs are judged and kept: no dict each
class Graded:
    """One run as the rule sees it: its figures, its fraction of the points, or why it earns none."""

    job: RunRef
    op_time: float | None
    accuracy: float | None
    measured: bool
    late: timedelta | None
    paid: bool = False  # late, and paid for with late days
    fraction: float = 0.0
    penalty: float = 0.0
    reason: str = ""

    @property
    def valid(self) -> bool:
        return not self.reason


@dataclass
class GradeRow:
    username: str
    first: str
    last: str
    email: str
    team: str
    grade: float
    points: float
    run: Graded | None
    reason: str  # why 0 (or what was taken off); empty when nothing is

    @property
    def name(self) -> str:
        return " ".join(p for p in (self.first, self.last) if p)


def _judge(job: Job, rule: GradeRule, threshold: float, ranked: bool, deadlines: Deadlines) -> Graded:
    op, acc, measured, problem = figures_of(job.results)  # not the whole summary: every run of the kind is judged
    g = Graded(RunRef(job.id, job.created_at), op, acc, measured, deadlines.late_by(job))
    g.paid = g.late is not None and deadlines.counts(job)
    if job.state is not JobState.succeeded:
        g.reason = f"the run {job.state.value.replace('_', ' ')}"
    elif ranked and not measured:
        g.reason = "not measured by the service (the course's build file was not installed)"
    elif ranked and problem:
        g.reason = f"not measured: {problem}"
    elif acc is None:
        g.reason = "no correctness reported"
    elif acc < threshold:
        g.reason = f"accuracy {acc:.4g} is below {threshold:g}"
    elif needs_op_time(rule) and op is None:
        g.reason = "no op time"
    elif g.late is not None and not deadlines.counts(job):
        row = deadlines.kinds[job.kind]
        if row.late_policy != "mark":
            g.reason = f"submitted {in_words(g.late)} after the deadline"
        else:
            g.penalty = min(1.0, rule.late_penalty * late_days_for(g.late))
    return g


def team_of(user: Person) -> str:
    return f"team:{user.team}" if user.team else f"user:{user.username}"


def _order(g: Graded) -> tuple[datetime, str]:
    return g.job.created_at, g.job.id


def _op(g: Graded) -> float:
    return math.inf if g.op_time is None else float(g.op_time)


def front(runs: Sequence[Graded]) -> list[Graded]:
    """The valid runs, in submission order, that no earlier valid run beats on both op time and late
    penalty. Every rule's points fall as the op time or the penalty grows, and of equals the earlier
    run counts, so a team's best run is among these whatever the class median (stddev), and so is its
    fastest; the others can never count. ``front(front(a) + b) == front(a + b)``: a sheet keeps these."""
    out: list[Graded] = []
    for g in sorted(runs, key=_order):
        if g.valid and not any(f.penalty <= g.penalty and _op(f) <= _op(g) for f in out):
            out.append(g)
    return out


@dataclass(frozen=True, slots=True)
class TeamRuns:
    """What a sheet keeps of a team's judged runs: those that may count (``front``) and the latest
    (its reason is the team's when none counts)."""

    front: list[Graded]
    last: Graded


@dataclass
class Sheet:
    """A kind's runs judged, per team: the runs that ended by ``until``, judged under ``inputs`` (a
    run's verdict does not change while they are the same)."""

    inputs: tuple[Any, ...]
    until: datetime | None = None
    by_team: dict[str, TeamRuns] = field(default_factory=dict)
    remeasured: set[str] = field(default_factory=set)
    best: dict[str, Graded] | None = None  # each team's best run, once worked out from these runs alone
    personal: Personal | None = None  # late days drawn and extensions, as the runs were judged under them

    def copy(self) -> Sheet:
        """A sheet to fold more runs into (a team's entry is replaced, never changed: they are shared)."""
        return Sheet(self.inputs, self.until, dict(self.by_team), set(self.remeasured), personal=self.personal)

    def rejudge(self, db: Session, kind: str, personal: Personal, people: Sequence[Any], judge: Callable[[Job], Graded]) -> None:
        """Late days drawn or an extension changed for some students: their teams' runs judged again
        (a late submission's late days make an earlier late run count), the others' kept."""
        before, self.personal = self.personal, personal
        if before is None or self.until is None:
            return
        owners = before.changed(personal, people)
        keys = {team_of(p) for p in people if p.id in owners}
        for key in keys:
            self.by_team.pop(key, None)
        members = [p.id for p in people if team_of(p) in keys]
        if members:
            self.fold(_runs(db, kind, owners=members, until=self.until), judge)

    def fold(self, jobs: Sequence[Job], judge: Callable[[Job], Graded]) -> None:
        added: dict[str, list[Graded]] = {}
        for job in jobs:
            if job.id in self.remeasured or not is_student(job.owner.role):
                continue  # measured again (that run's result stands, issue 32), or staff trying the kind out
            added.setdefault(team_of(job.owner), []).append(judge(job))
        for team, runs in added.items():
            had = self.by_team.get(team)
            last = max(runs if had is None else [had.last, *runs], key=_order)
            self.by_team[team] = TeamRuns(front([*(had.front if had else []), *runs]), last)


# Each kind's judged runs, per process (issue 52): a sheet judged every run of its kind each time,
# 30,000 runs and 4 s for the final at 250,000 jobs, and staff's regrades page makes one per kind
# it shows. The runs that ended since are judged and folded in; anything that changes how an
# earlier run is judged (a deadline, an extension, late days drawn, the roster, the rule, a
# re-measure) judges every run again.
_SHEETS: weakref.WeakKeyDictionary[Any, dict[str, Sheet]] = weakref.WeakKeyDictionary()  # per engine
_SHEETS_LOCK = threading.Lock()
# what a grade reads of each run (not its build file, timeline and messages)
GRADED = (Job.id, Job.owner_id, Job.kind, Job.state, Job.results, Job.created_at, Job.finished_at, Job.remeasure_of)


def _runs(
    db: Session, kind: str, after: datetime | None = None, owners: Collection[int] | None = None, until: datetime | None = None
) -> Sequence[Job]:
    """The kind's runs in submission order; ``after``: only those that ended after it or have not
    ended; ``until``: only those that ended by then; ``owners``: only theirs."""
    query = select(Job).options(load_only(*GRADED), joinedload(Job.owner)).where(Job.kind == kind)
    if after is not None:
        query = query.where(or_(Job.finished_at > after, Job.finished_at.is_(None)))
    if until is not None:
        query = query.where(Job.finished_at <= until)
    if owners is not None:
        query = query.where(Job.owner_id.in_(owners))
    return db.scalars(query.order_by(Job.created_at, Job.id)).all()


def judged(
    db: Session,
    kind: str,
    inputs: tuple[Any, ...],
    deadlines: Deadlines,
    people: Sequence[Any],
    judge: Callable[[Job], Graded],
    settled_only: bool = False,
) -> tuple[dict[str, TeamRuns], Sheet | None]:
    """Every run of ``kind`` judged, per team: the settled ones from this process's sheet, the rest
    now (``settled_only``: not read, the background pass keeping the sheet up to date); and the
    kept sheet itself when nothing was added to it (its ``best`` holds then). Called in the
    sheet's turn (``grading.keeping``)."""
    settled = utcnow() - SETTLE
    personal = deadlines.personal()
    with _SHEETS_LOCK:
        sheets = _SHEETS.setdefault(db.get_bind(), {})
        kept = sheets.get(kind)
        sheet = kept.copy() if kept is not None and kept.inputs == inputs and kept.personal is not None else None
    rejudged = sheet is not None and sheet.personal != personal
    if sheet is not None and rejudged:
        sheet.rejudge(db, kind, personal, people, judge)
    last = settled if settled_only else None
    jobs = _runs(db, kind, sheet.until if sheet is not None else None, until=last)
    if kept is not None and sheet is not None and not jobs and not rejudged:  # nothing ended since, nothing in flight
        with _SHEETS_LOCK:
            kept.until = settled
        return kept.by_team, kept
    again = {j.remeasure_of for j in jobs if j.remeasure_of and j.state.finished}
    if sheet is not None and not again <= sheet.remeasured:  # a re-measure took a run off that was judged: all again
        sheet, jobs = None, _runs(db, kind, until=last)
    if sheet is None:
        sheet = Sheet(inputs, remeasured={j.remeasure_of for j in jobs if j.remeasure_of and j.state.finished}, personal=personal)
    ended = [j for j in jobs if j.finished_at is not None and aware(j.finished_at) <= settled]
    sheet.fold(ended, judge)
    sheet.until = settled
    with _SHEETS_LOCK:
        sheets[kind] = sheet.copy()
    done = {j.id for j in ended}
    sheet.fold([j for j in jobs if j.id not in done], judge)  # this look only: not ended, or not settled yet
    return sheet.by_team, None


def _best_of(by_team: dict[str, TeamRuns], rule: GradeRule, kind: str) -> dict[str, Graded]:
    """Each team's best run (the most points, the earliest of equals) with its fraction of the points
    (set on a copy: the judged runs may be kept and shared)."""
    fastest = [min(float(g.op_time or 0) for g in team.front) for team in by_team.values() if team.front]
    c = class_times(rule, kind, fastest)
    best_of: dict[str, Graded] = {}
    for key, team in by_team.items():
        top, most = None, -1.0
        for g in team.front:  # in submission order: a later run must earn more to take the place
            if (f := max(0.0, fraction(rule, float(g.op_time or 0), c) - g.penalty)) > most:
                top, most = g, f
        if top is not None:
            best_of[key] = replace(top, fraction=most)
    return best_of


def grades(db: Session, settings: Settings, kind: str, settled_only: bool = False) -> tuple[GradeRule, list[GradeRow]]:
    """Every active student's grade on ``kind`` (raises Invalid with one line if it cannot be
    computed). ``settled_only``: from the kept sheet brought up to date, without the runs of the
    last minutes (the background pass)."""
    # what decides the sheet read in its turn: a look that waited reads what the one before it kept
    # the sheet under, not what held when it started waiting
    with one_maker(db.get_bind(), ("sheet", kind)):
        rule = rule_of(kind_row(db, kind))
        if rule is None:
            raise Invalid(f"'{kind}' has no grade rule; set one: raiclient admin kinds set {kind} --grade {'|'.join(RULES)} …")
        threshold = rule.threshold if rule.threshold is not None else settings.correctness_threshold
        ranked = kind in settings.ranked_kind_set
        deadlines = Deadlines(db, settings)
        # the roster once, as rows (its hash tells a kept sheet whether teams or roles changed; its
        # students are the sheet's rows: no 400 ORM objects a look)
        roster = (User.id, User.username, User.team, User.role, User.active, User.firstname, User.lastname, User.email)
        people = db.execute(select(*roster).order_by(User.username)).all()
        inputs = (deadlines.fingerprint(), hash(tuple(people)), rule.model_dump_json(), threshold, ranked)
        judge = lambda job: _judge(job, rule, threshold, ranked, deadlines)  # noqa: E731 - one line, used once
        by_team, kept = judged(db, kind, inputs, deadlines, people, judge, settled_only)
        best_of = kept.best if kept is not None and kept.best is not None else _best_of(by_team, rule, kind)
        if kept is not None:
            kept.best = best_of
    out = []
    students = [p for p in people if is_student(p.role) and p.active]  # by username, as the database orders them
    for user in students:
        team = by_team.get(team_of(user))
        best = best_of.get(team_of(user))
        if best is None:
            reason = team.last.reason if team else f"no '{kind}' submission"
        elif best.penalty:
            reason = f"late by {in_words(best.late or timedelta())}: −{best.penalty * 100:g} %"
        else:
            reason = ""
        out.append(
            GradeRow(
                user.username,
                user.firstname or "",
                user.lastname or "",
                user.email or "",
                user.team or "",
                round(rule.points * best.fraction, 2) if best else 0.0,
                rule.points,
                best,
                reason,
            )
        )
    return rule, out


def timing(g: Graded | None) -> str:
    """On time, or late and by how much."""
    if g is None:
        return ""
    return "on time" if g.late is None else f"late by {in_words(g.late)}" + (" (late days)" if g.paid else "")


def submitted(g: Graded | None) -> datetime | None:
    return g.job.created_at if g is not None else None
