"""Finding people (issue 37): the staff's users list, searched by any part of a username, name,
email or team, narrowed by role and by whether the account is active, with each one's job count."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from raiserver.access.permissions import ROLES
from raiserver.store.tables import Job, User

MAX_SHOWN = 500  # rows on one page: a course is a few hundred people; a search narrows the rest
MAX_QUERY = 100  # characters of a search that are used


@dataclass(frozen=True)
class Person:
    user: User
    jobs: int


def find_people(db: Session, text: str = "", role: str = "", active: str = "") -> tuple[list[Person], int]:
    """The users matching every given filter, by username, and how many match in all. ``text``
    matches case-insensitively anywhere in the username, first and last name, email or team (taken
    literally: ``%`` and ``_`` are no wildcards); an unknown ``role`` or ``active`` filters nothing."""
    q = select(User)
    words = text.strip()[:MAX_QUERY].split()
    for word in words:  # every word somewhere: "ada team-3" finds Ada in team-3
        literal = word.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        like = f"%{literal}%"
        q = q.where(
            or_(
                *(
                    func.lower(func.coalesce(col, "")).like(like, escape="\\")
                    for col in (User.username, User.firstname, User.lastname, User.email, User.team)
                )
            )
        )
    if role in ROLES:
        q = q.where(User.role == role)
    if active in ("yes", "no"):
        q = q.where(User.active.is_(active == "yes"))
    total = db.scalar(select(func.count()).select_from(q.subquery())) or 0
    users = db.scalars(q.order_by(User.username).limit(MAX_SHOWN)).all()
    counts = (
        dict(
            db.execute(select(Job.owner_id, func.count()).where(Job.owner_id.in_([u.id for u in users])).group_by(Job.owner_id))
            .tuples()
            .all()
        )
        if users
        else {}
    )
    return [Person(u, counts.get(u.id, 0)) for u in users], total
