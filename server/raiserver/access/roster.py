"""The class list: a roster CSV applied to the users. New students get keys (returned once),
changed rows are updated, students missing from the list are deactivated with their history kept;
who may change or grant whom is permissions.py's to say."""

from __future__ import annotations

import csv
import io

from sqlalchemy import select
from sqlalchemy.orm import Session

from raiprotocol.models import IssuedKeys, RosterResult
from raiserver.access.auth import create_user
from raiserver.access.permissions import ROLES, may_change, may_grant, students_only
from raiserver.errors import Invalid
from raiserver.store.tables import User


def issued(user: User, secret: str) -> IssuedKeys:
    """A user's new keys with what a profile file holds (shown once)."""
    return IssuedKeys(
        username=user.username,
        access_key=user.access_key,
        secret_key=secret,
        firstname=user.firstname,
        lastname=user.lastname,
        email=user.email,
        team=user.team,
    )


def _row_fields(actor: User, row: dict[str, str], lineno: int) -> tuple[str, dict[str, str | None]]:
    """One roster line checked: its username and the fields it sets (the role only when given)."""
    username = row.get("username", "")
    if not username.replace("_", "").replace("-", "").replace(".", "").isalnum() or len(username) > 64:
        raise Invalid(f"roster line {lineno}: bad username {username!r}")
    role = row.get("role") or None  # no role column, or an empty cell: the role is not changed
    if role is not None and role not in ROLES:
        raise Invalid(f"roster line {lineno}: unknown role {role!r}")
    if role is not None:
        may_grant(actor, role, f"roster line {lineno}: ")
    first, last = row.get("firstname"), row.get("lastname")
    if not first and row.get("name"):
        first, _, last = row["name"].partition(" ")
    fields = {"firstname": first or None, "lastname": last or None, "email": row.get("email") or None, "team": row.get("team") or None}
    if role is not None:
        fields["role"] = role
    return username, fields


def import_csv(db: Session, actor: User, csv_text: str) -> RosterResult:
    """CSV with a header: username (required), name or firstname/lastname, email, team, role."""
    reader = csv.DictReader(io.StringIO(csv_text.lstrip("\ufeff")))
    if not reader.fieldnames or "username" not in [f.strip().lower() for f in reader.fieldnames]:
        raise Invalid("roster: the first line must name the columns, with at least 'username'")
    result = RosterResult()
    listed: set[str] = set()
    for lineno, raw in enumerate(reader, start=2):
        row = {(k or "").strip().lower(): (v or "").strip() for k, v in raw.items()}
        if not row.get("username", ""):
            continue
        username, fields = _row_fields(actor, row, lineno)
        listed.add(username)
        user = db.scalar(select(User).where(User.username == username))
        if user is None:
            user, secret = create_user(db, username, **{"role": "student", **fields})  # type: ignore[arg-type]
            result.created.append(issued(user, secret))
            continue
        changed = {k: v for k, v in fields.items() if getattr(user, k) != v}
        if changed or not user.active:
            may_change(actor, user, f"roster line {lineno}: ")
        for k, v in changed.items():
            setattr(user, k, v)
        if not user.active:
            user.active = True
            result.reactivated.append(username)
        elif changed:
            result.updated.append(username)
        else:
            result.unchanged.append(username)
    for user in db.scalars(select(User).where(students_only(), User.active.is_(True))):
        if user.username not in listed:
            user.active = False
            result.deactivated.append(user.username)
    return result
