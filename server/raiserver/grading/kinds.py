"""The course's submission kinds (issue 36): when each opens, when it is due, what a submission
after that gets (refused; kept and marked late; or paid for with late days from the student's
budget), and per-student or per-team extensions. ``Deadlines`` reads it all once and answers for
any student: their own deadline, how late a run was, whether it counts (ranks, earns a grade).

Dates are compared in UTC; instructors write them in ISO 8601 (no offset: UTC)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from functools import cached_property
from typing import Any, Protocol

from pydantic import ValidationError
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from raiprotocol.models import ExtensionIn, ExtensionOut, GradeRule, KindIn, KindOut
from raiserver.access.permissions import submits_any_time
from raiserver.config import Settings
from raiserver.errors import Closed, Invalid, NotFound
from raiserver.grading.rules import check_rule
from raiserver.store.db import utcnow
from raiserver.store.tables import Extension, Job, Kind, User

DAY = timedelta(days=1)
NAME_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789_-")


def aware(t: datetime) -> datetime:
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def parse_when(text: str, what: str) -> datetime | None:
    """An ISO 8601 date and time (no offset: UTC); "none" or "" is None. One clear line otherwise."""
    text = text.strip()
    if text.lower() in ("", "none"):
        return None
    try:
        t = aware(datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith(("Z", "z")) else text))
    except ValueError:
        raise Invalid(
            f"{what}: {text[:64]!r} is not a date; write ISO 8601, e.g. 2026-05-01T23:59-05:00 (without an offset it is UTC)"
        ) from None
    if not 2000 <= t.year <= 2200:  # a typo, and one that would overflow when a late window is added
        raise Invalid(f"{what}: {text[:64]!r} is not a date of a term (years 2000 to 2200)")
    return t


def in_words(d: timedelta) -> str:
    """A span as a student reads it: "2 d 3 h", "2 h 13 min", "4 min", "40 s"."""
    s = int(abs(d.total_seconds()))
    days, hours, minutes = s // 86400, s % 86400 // 3600, s % 3600 // 60
    if days:
        return f"{days} d {hours} h" if hours else f"{days} d"
    if hours:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    return f"{minutes} min" if minutes else f"{s} s"


def when(t: datetime) -> str:
    return f"{aware(t):%Y-%m-%d %H:%M} UTC"


def late_days_for(late: timedelta) -> int:
    """Late days a submission this late needs: each started day counts."""
    return max(1, math.ceil(late / DAY))


def kind_row(db: Session, name: str) -> Kind:
    row = db.get(Kind, name)
    if row is None:
        names = ", ".join(sorted(db.scalars(select(Kind.name)))) or "none"
        raise NotFound(f"this course has no submission kind '{name}'; it has: {names}")
    return row


def update_kind(db: Session, name: str, change: KindIn, create: bool) -> Kind:
    """Apply an instructor's change to a kind (created when ``create``); checked whole before anything
    is written: a bad date, a deadline before the opening, a late window with the refuse policy."""
    if not (1 <= len(name) <= 32) or not set(name) <= NAME_CHARS or not name[0].isalnum():
        raise Invalid(f"bad kind name {name[:40]!r}: lower-case letters, digits, - and _ (at most 32)")
    row = db.get(Kind, name)
    if row is None and not create:
        kind_row(db, name)
    given = change.model_fields_set
    opens = parse_when(change.opens or "", "--opens") if "opens" in given else (row.opens_at if row else None)
    due = parse_when(change.due or "", "--due") if "due" in given else (row.due_at if row else None)
    policy = change.late_policy if change.late_policy is not None else (row.late_policy if row else "refuse")
    hours = (change.late_hours or None) if "late_hours" in given else (row.late_hours if row else None)
    grading = change.grading.model_dump() if change.grading is not None else (row.grading if row else None)
    if opens and due and opens >= due:
        raise Invalid(f"'{name}' would be due ({when(due)}) before it opens ({when(opens)})")
    if policy != "refuse" and due is None:
        raise Invalid(f"the late policy '{policy}' needs a deadline: give --due")
    if hours and policy == "refuse":
        raise Invalid(f"a late window ({hours:g} h) needs the late policy 'mark' or 'days'; 'refuse' takes nothing late")
    if change.grading is not None:
        check_rule(change.grading)
    if row is None:
        row = Kind(name=name)
        db.add(row)
    row.opens_at, row.due_at, row.late_policy, row.late_hours, row.grading = opens, due, policy, hours, grading
    return row


def rule_of(row: Kind) -> GradeRule | None:
    try:
        return GradeRule.model_validate(row.grading) if row.grading else None
    except ValidationError:
        return None


@dataclass(frozen=True)
class Admission:
    """What a submission of a kind gets now: its late mark, the late days it draws, the line the client prints."""

    late: timedelta | None
    late_days: int
    note: str | None
    due: datetime | None = None
    counts: bool = True  # inside the student's own deadline (on time, or paid for with late days)


class Submission(Protocol):
    """What the deadlines read of a run: a Job, or a board's lighter view of one (``leaderboard.Candidate``)."""

    @property
    def kind(self) -> str: ...
    @property
    def owner_id(self) -> int: ...
    @property
    def created_at(self) -> datetime: ...
    @property
    def owner(self) -> User: ...


@dataclass(frozen=True)
class Personal:
    """What of the deadlines applies to some students only: late days drawn per (student id, kind),
    extensions per (kind, username) and per (kind, team)."""

    drawn: frozenset[tuple[tuple[int, str], int]]
    by_user: frozenset[tuple[tuple[str, str], datetime]]
    by_team: frozenset[tuple[tuple[str, str], datetime]]

    def changed(self, other: Personal, people: Iterable[Person]) -> set[int]:
        """The ids of the students for whom ``other`` says something else (a late submission drew late
        days, an extension was granted or ended): only their runs are judged again."""
        users = {name for (_, name), _ in self.by_user ^ other.by_user}
        teams = {team for (_, team), _ in self.by_team ^ other.by_team}
        ids = {owner for (owner, _), _ in self.drawn ^ other.drawn}
        return ids | {p.id for p in people if p.username in users or (p.team is not None and p.team in teams)}


class Person(Protocol):
    """A roster row as the caches read it (``User``, or a row of its columns)."""

    @property
    def id(self) -> int: ...
    @property
    def username(self) -> str: ...
    @property
    def team(self) -> str | None: ...


class Deadlines:
    """Every kind, extension and late day of the course, read once (a page, a grade sheet, a board).
    The kinds are read at once; the extensions and the late days drawn only when first asked: a
    job's view asks whether it is late (issue 52: every submission's answer and every stream's
    first look read all three, 7 % of a busy server's time, for courses where no kind is due)."""

    def __init__(self, db: Session, settings: Settings):
        self.db = db
        self.settings = settings
        self.kinds = {k.name: k for k in db.scalars(select(Kind))}

    @cached_property
    def _extensions(self) -> tuple[dict[tuple[str, str], datetime], dict[tuple[str, str], datetime], dict[str, int]]:
        by_user: dict[tuple[str, str], datetime] = {}
        by_team: dict[tuple[str, str], datetime] = {}
        count: dict[str, int] = {}
        for e in self.db.scalars(select(Extension)):
            target = by_user if e.username else by_team
            target[(e.kind, e.username or e.team or "")] = e.due_at
            count[e.kind] = count.get(e.kind, 0) + 1
        return by_user, by_team, count

    @property
    def by_user(self) -> dict[tuple[str, str], datetime]:
        return self._extensions[0]

    @property
    def by_team(self) -> dict[tuple[str, str], datetime]:
        return self._extensions[1]

    @property
    def count(self) -> dict[str, int]:
        return self._extensions[2]

    @cached_property
    def drawn(self) -> dict[tuple[int, str], int]:
        return {
            (owner, kind): int(n or 0)
            for owner, kind, n in self.db.execute(
                select(Job.owner_id, Job.kind, func.sum(Job.late_days)).where(Job.late_days > 0).group_by(Job.owner_id, Job.kind)
            )
        }

    def fingerprint(self) -> tuple[Any, ...]:
        """The kinds as read, comparable: a page kept from an earlier look (a board, a grade sheet)
        is right for everyone only while this is the same (``personal`` is what applies to some)."""
        return tuple(sorted((k.name, k.due_at, k.late_policy, k.late_hours, repr(k.grading)) for k in self.kinds.values()))

    def personal(self) -> Personal:
        return Personal(frozenset(self.drawn.items()), frozenset(self.by_user.items()), frozenset(self.by_team.items()))

    def due_for(self, kind: str, user: User) -> datetime | None:
        """The student's own deadline: the kind's, or the latest of their and their team's extensions."""
        row = self.kinds.get(kind)
        if row is None or row.due_at is None:
            return None
        dates = [row.due_at, self.by_user.get((kind, user.username)), self.by_team.get((kind, user.team or "")) if user.team else None]
        return max(aware(d) for d in dates if d is not None)

    def late_by(self, job: Submission) -> timedelta | None:
        """How late the job was submitted after its owner's deadline, or None when on time."""
        due = self.due_for(job.kind, job.owner)
        if due is None or aware(job.created_at) <= due:
            return None
        return aware(job.created_at) - due

    def days_used(self, user: User) -> int:
        return sum(n for (owner, _), n in self.drawn.items() if owner == user.id)

    def days_left(self, user: User) -> int:
        return max(0, self.settings.late_days - self.days_used(user))

    def counts(self, job: Submission) -> bool:
        """Inside the student's own deadline: on time, or late and paid for with late days."""
        late = self.late_by(job)
        if late is None:
            return True
        row = self.kinds.get(job.kind)
        return row is not None and row.late_policy == "days" and late_days_for(late) <= self.drawn.get((job.owner_id, job.kind), 0)

    def status(self, kind: str, user: User, now: datetime) -> str:
        """The kind as this student sees it now."""
        row = self.kinds[kind]
        if row.opens_at and now < aware(row.opens_at):
            return f"opens in {in_words(aware(row.opens_at) - now)}"
        due = self.due_for(kind, user)
        if due is None:
            return "open"
        if now <= due:
            return f"due in {in_words(due - now)}"
        end = due + timedelta(hours=row.late_hours) if row.late_hours else None
        if row.late_policy == "refuse" or (end is not None and now > end):
            return "closed"
        rest = f" for {in_words(end - now)} more" if end else ""
        what = "with late days" if row.late_policy == "days" else ", marked late"
        return f"late: accepted{what if what.startswith(',') else ' ' + what}{rest}"

    def still_open(self, kind: str, now: datetime) -> str:
        """Staff's word on a kind past its own deadline that extensions keep open for some (issue
        49: the Deadlines page said "closed" while students with an extension could still submit),
        or "" when none does."""
        live = [(who, aware(due)) for (k, who), due in self.by_user.items() if k == kind and now <= aware(due)]
        teams = [(who, aware(due)) for (k, who), due in self.by_team.items() if k == kind and now <= aware(due)]
        if not live and not teams:
            return ""
        whom = " and ".join(f"{n} {what}{'s' if n > 1 else ''}" for n, what in ((len(live), "student"), (len(teams), "team")) if n)
        last = max(due for _, due in live + teams)
        one = len(live) + len(teams) == 1
        until = f"until {when(last)}" if one else f"the last until {when(last)}"
        return f"; still open for {whom} with {'an extension' if one else 'extensions'} ({until})"

    def out(self, row: Kind, user: User, staff: bool, now: datetime) -> KindOut:
        return KindOut(
            name=row.name,
            opens_at=row.opens_at,
            due_at=row.due_at,
            late_policy=row.late_policy,
            late_hours=row.late_hours,
            grading=rule_of(row),
            extensions=self.count.get(row.name, 0) if staff else 0,
            your_due_at=self.due_for(row.name, user),
            status=self.status(row.name, user, now) + (self.still_open(row.name, now) if staff and self._past(row, now) else ""),
        )

    @staticmethod
    def _past(row: Kind, now: datetime) -> bool:
        return row.due_at is not None and now > aware(row.due_at)

    def admit(self, kind: str, user: User, now: datetime) -> Admission:
        """Whether ``user`` may submit ``kind`` now; raises Closed (one line) if not. Staff may
        submit any time (their runs are marked all the same)."""
        row = self.kinds.get(kind)
        if row is None:
            names = ", ".join(sorted(self.kinds)) or "none"
            raise Invalid(f"this course has no submission kind '{kind}'; it has: {names}")
        staff = submits_any_time(user)
        if row.opens_at and now < aware(row.opens_at) and not staff:
            raise Closed(f"'{kind}' opens at {when(row.opens_at)} (in {in_words(aware(row.opens_at) - now)})")
        due = self.due_for(kind, user)
        if due is None:
            return Admission(None, 0, None)
        if now <= due:
            return Admission(None, 0, f"{kind} is due in {in_words(due - now)} ({when(due)})", due)
        late = now - due
        yours = " (your extended deadline)" if row.due_at is not None and due > aware(row.due_at) else ""
        end = due + timedelta(hours=row.late_hours) if row.late_hours else None
        if not staff and (row.late_policy == "refuse" or (end is not None and now > end)):
            after = (
                f"; its late window closed {in_words(now - end)} ago"
                if end is not None and row.late_policy != "refuse"
                else "; late submissions are not accepted"
            )
            raise Closed(f"'{kind}' was due at {when(due)}{yours}, {in_words(late)} ago{after}")
        if row.late_policy == "days" and not staff:
            need = late_days_for(late)
            drawn = self.drawn.get((user.id, kind), 0)
            extra = max(0, need - drawn)
            left = self.days_left(user)
            if extra > left:
                more = f" ({extra} more than the {drawn} drawn for it)" if drawn else ""
                raise Closed(
                    f"'{kind}' was due at {when(due)}{yours}, {in_words(late)} ago: a submission now needs "
                    f"{need} late day(s){more} and you have {left} left of {self.settings.late_days}"
                )
            spent = f"{extra} late day(s) drawn, {left - extra} left" if extra else f"within the {drawn} late day(s) already drawn"
            return Admission(
                late, extra, f"{kind} was due {in_words(late)} ago ({when(due)}{yours}): this submission is late; {spent}", due
            )
        return Admission(
            late, 0, f"{kind} was due {in_words(late)} ago ({when(due)}{yours}): this submission is marked late", due, counts=False
        )


def grant(db: Session, kind: str, body: ExtensionIn, by: str) -> Extension:
    """A later deadline for one student or team (replacing an earlier one of theirs); checked whole first."""
    row = kind_row(db, kind)
    if (body.username is None) == (body.team is None):
        raise Invalid("an extension is for one student (--student) or one team (--team)")
    if (body.until is None) == (body.hours is None):
        raise Invalid("give the new deadline (--until) or how many hours later it is (--hours)")
    if row.due_at is None:
        raise Invalid(f"'{kind}' has no deadline to extend (set one: raiclient admin kinds set {kind} --due …)")
    if body.username is not None:
        user = db.scalar(select(User).where(User.username == body.username))
        if user is None:
            raise NotFound(f"no student {body.username!r} on the roster")
    elif db.scalar(select(User.id).where(User.team == body.team).limit(1)) is None:
        raise NotFound(f"no team {body.team!r} on the roster")
    due = parse_when(body.until, "--until") if body.until is not None else aware(row.due_at) + timedelta(hours=body.hours or 0)
    if due is None or due <= aware(row.due_at):
        raise Invalid(f"an extension must end after '{kind}' is due ({when(row.due_at)})")
    ext = (
        db.scalar(select(Extension).where(Extension.kind == kind, Extension.username == body.username, Extension.team == body.team))
        if body.username
        else db.scalar(select(Extension).where(Extension.kind == kind, Extension.team == body.team, Extension.username.is_(None)))
    )
    if ext is None:
        ext = Extension(kind=kind, username=body.username, team=body.team, granted_by=by)
        db.add(ext)
    ext.due_at, ext.reason, ext.granted_by, ext.granted_at = due, body.reason, by, utcnow()
    return ext


def end_extension(db: Session, kind: str, username: str | None, team: str | None) -> Extension:
    """The extension of one student or team on ``kind``, deleted (in ``db``'s transaction)."""
    kind_row(db, kind)
    if (username is None) == (team is None):
        raise Invalid("name the student (--student) or the team (--team) whose extension ends")
    query = select(Extension).where(Extension.kind == kind)
    ext = db.scalar(
        query.where(Extension.username == username) if username else query.where(Extension.team == team, Extension.username.is_(None))
    )
    if ext is None:
        raise NotFound(f"no extension of '{kind}' for {username or 'team ' + (team or '')}")
    db.delete(ext)
    return ext


def extension_out(e: Extension) -> ExtensionOut:
    return ExtensionOut(
        kind=e.kind, username=e.username, team=e.team, due_at=e.due_at, reason=e.reason, granted_by=e.granted_by, granted_at=e.granted_at
    )
