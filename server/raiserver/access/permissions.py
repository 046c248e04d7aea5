"""Who may do what: the roles and every rule about them, in one place. The API, the web view, the
queue's fair share and the quotas ask these functions; none restates a rule."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from raiserver.errors import Forbidden

if TYPE_CHECKING:
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


@dataclass
class Principal:
    """Who is calling (API key or browser session), as every rule below sees them."""

    user: User

    @property
    def is_staff(self) -> bool:
        return is_staff(self.user.role)


def is_staff(role: str) -> bool:
    return role in STAFF


def is_instructor(role: str) -> bool:
    return role in INSTRUCTORS


def can_see(p: Principal, job: Job) -> bool:
    """Staff, the owner, and the owner's teammates."""
    if p.is_staff or job.owner_id == p.user.id:
        return True
    return bool(p.user.team) and job.owner.team == p.user.team


def can_cancel(p: Principal, job: Job) -> bool:
    """Teammates see each other's jobs but may not stop them: the owner or staff only (API and web)."""
    return p.is_staff or job.owner_id == p.user.id


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
