"""Who may do what: the roles and every rule about them, in one place. The API, the web view, the
queue's fair share and the quotas ask these functions; none restates a rule."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from functools import lru_cache
from typing import TYPE_CHECKING

from sqlalchemy import ColumnElement, select, true

from raiserver.errors import Forbidden

if TYPE_CHECKING:
    from raiserver.config import Settings
    from raiserver.store.tables import Job, User


class Role(str, Enum):
    student = "student"
    ta = "ta"
    instructor = "instructor"
    admin = "admin"


ROLES = tuple(r.value for r in Role)  # lowest to highest
RANK = {role: i for i, role in enumerate(ROLES)}
STAFF = (Role.ta.value, Role.instructor.value, Role.admin.value)  # see every job, the workers, the roster
INSTRUCTORS = (Role.instructor.value, Role.admin.value)  # change the course: roster, keys, images, build files


@dataclass(eq=False)
class Principal:
    """Who is calling (API key or browser session), as every rule below sees them. What the rules
    decide about the caller alone is decided here, once, when they are recognised: a request asks
    the policy at that one moment, not again at each step of its way."""

    user: User
    is_staff: bool = field(init=False)
    many_log_streams: bool = field(init=False)  # the larger cap on the log streams one user holds open
    jobs_seen: ColumnElement[bool] = field(init=False)  # which jobs they may see, as a query's condition

    def __post_init__(self) -> None:
        self.is_staff = is_staff(self.user.role)
        # Staff follow many jobs at once.
        self.many_log_streams = self.is_staff
        # Staff see every job; anyone else their own and their teammates' (and the same "no such
        # job" for the rest, asked by a whole id or by a start or an end of one).
        self.jobs_seen = true() if self.is_staff else _own_and_team_jobs(self.user.id, self.user.team or None)


@lru_cache(maxsize=4096)
def _own_and_team_jobs(user_id: int, team: str | None) -> ColumnElement[bool]:
    """A student's jobs and their team's, as a query's condition (an immutable expression: made once
    per student and team, ~0.1 ms, not at every request)."""
    from raiserver.store import tables  # the tables know the roles: imported when first needed

    owner = tables.Job.owner_id
    if team is None:
        return owner == user_id
    return owner.in_(select(tables.User.id).where(tables.User.team == team)) | (owner == user_id)


def is_staff(role: str) -> bool:
    return role in STAFF


def is_instructor(role: str) -> bool:
    return role in INSTRUCTORS


def is_student(role: str) -> bool:
    """Students are the ones graded: the gradebook's rows, the roster's (deactivated when left off
    it), the teams compared for similarity; staff trying a kind out are none of these."""
    return role == Role.student.value


def students_only() -> ColumnElement[bool]:
    """is_student in SQL: a query's condition on User."""
    from raiserver.store.tables import User

    return User.role == Role.student.value


# -- what staff are spared, and where they go first --------------------------------------------


def exempt_from_limits(user: User, settings: Settings) -> bool:
    """Staff are exempt (RAI_STAFF_EXEMPT, on by default) from every per-student limit: active jobs,
    submissions a minute and a day, GPU minutes, ranked runs a day, storage, the upload gate."""
    return settings.staff_exempt and is_staff(user.role)


def goes_first(owner: User, staff_priority: bool) -> bool:
    """Staff's jobs go to the front of fair share (RAI_STAFF_PRIORITY, on by default)."""
    return staff_priority and is_staff(owner.role)


def submits_any_time(user: User) -> bool:
    """Staff may submit any kind at any time: before it opens, past its deadline and late window,
    drawing no late days (their runs are marked all the same)."""
    return is_staff(user.role)


# -- seeing ------------------------------------------------------------------------------------


def can_see_staff_pages(p: Principal) -> bool:
    """The staff's API and pages (regrades to answer, similarity, the course's build files, re-measures):
    TAs, instructors, admins."""
    return p.is_staff


def can_see_all_jobs(p: Principal) -> bool:
    """Staff list everyone's jobs and see whose each queued job is; a student sees their own (and,
    through Principal.jobs_seen, their team's) and others' places in the queue without names."""
    return p.is_staff


def can_see_user(p: Principal, user: User) -> bool:
    """A user's page: staff, and the user themself."""
    return p.is_staff or user.id == p.user.id


def can_see_people(p: Principal) -> bool:
    """The users list (and finding a student in it): staff."""
    return p.is_staff


def can_see_workers(p: Principal) -> bool:
    """The workers (hosts, GPUs, what each runs): staff."""
    return p.is_staff


def can_see_course(p: Principal) -> bool:
    """The course as staff see it: every kind's extensions, who may still submit past a deadline."""
    return p.is_staff


def can_see_grades(p: Principal) -> bool:
    """Grades (the gradebook, its CSV) are for staff."""
    return p.is_staff


def sees_names_on_board(p: Principal) -> bool:
    """Staff see the leaderboard whole: real names, teams' members, job ids, the measurement's
    flags, and the board before the deadline when it is hidden; students see pseudonyms but their own."""
    return p.is_staff


def run_by_staff(owner: User) -> bool:
    """A run of staff's (not of a team): marked on the board, left out of similarity reports."""
    return is_staff(owner.role)


# -- acting ------------------------------------------------------------------------------------


def can_cancel(p: Principal, job: Job) -> bool:
    """Teammates see each other's jobs but may not stop them: the owner or staff only (API and web)."""
    return p.is_staff or job.owner_id == p.user.id


def can_delete_run(p: Principal, job: Job, verified_kind: str) -> bool:
    """Deleting a job's files: whoever may cancel it; a run of the verified kind is kept for
    grading, so only staff may delete one."""
    return can_cancel(p, job) and (job.kind != verified_kind or p.is_staff)


def can_rerun(p: Principal) -> bool:
    """Running a job again from its archive (or re-measuring it): staff."""
    return p.is_staff


def can_manage_course(p: Principal) -> bool:
    """Changing the course (kinds, deadlines, extensions, roster, keys, images, build files):
    instructors and admins."""
    return is_instructor(p.user.role)


def can_request_regrade(p: Principal, job: Job) -> bool:
    """A student of the run's team (its owner or a teammate) asks for a regrade; staff answer them."""
    if p.is_staff:
        return False
    return job.owner_id == p.user.id or (bool(p.user.team) and job.owner.team == p.user.team)


def can_answer_regrades(p: Principal) -> bool:
    """Staff (TAs included: they grade) see the open requests, re-measure, adjust a grade, answer."""
    return p.is_staff


def can_run_similarity(p: Principal) -> bool:
    """Staff only: the report shows every team's code side by side."""
    return p.is_staff


def may_change(actor: User, target: User, where: str = "") -> None:
    """Nobody changes a user of their own rank or higher (keys, role, team), except admins and
    oneself: an instructor who could rotate an admin's keys would receive a working admin secret."""
    if actor.role == Role.admin or actor.id == target.id:
        return
    if RANK[target.role] >= RANK[actor.role]:
        raise Forbidden(
            f"{where}{actor.role}s cannot change {target.username}, who is {'an' if target.role[0] in 'aeiou' else 'a'} {target.role}"
        )


def may_grant(actor: User, role: str, where: str = "") -> None:
    if role in INSTRUCTORS and actor.role != Role.admin:
        raise Forbidden(f"{where}only admins may grant the {role} role")
