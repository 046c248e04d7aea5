"""Kinds, deadlines and extensions (issue 36): every user reads the kinds as they apply to them
(their own deadline, late days left, their limits); instructors change them, audited."""

from __future__ import annotations

from fastapi import APIRouter, Query
from sqlalchemy import delete, select

from raiprotocol.models import ExtensionIn, ExtensionOut, KindIn, KindOut, KindsView, Limits
from raiserver.access.audit import audit
from raiserver.access.permissions import can_see_course
from raiserver.api.deps import CurrentUser, InstructorUser, ServicesDep, SessionDep, StaffUser
from raiserver.errors import Invalid
from raiserver.grading.kinds import Deadlines, end_extension, extension_out, grant, kind_row, update_kind
from raiserver.jobs.quotas import limits_of
from raiserver.store.db import utcnow
from raiserver.store.tables import Extension, Job, Kind

router = APIRouter(prefix="/api/v1", tags=["kinds"])


@router.get("/kinds", response_model=KindsView)
def kinds(p: CurrentUser, db: SessionDep, svc: ServicesDep) -> KindsView:
    """The course's kinds as they apply to the caller (their own deadlines), and their limits."""
    deadlines = Deadlines(db, svc.settings)
    now = utcnow()
    rows = sorted(deadlines.kinds.values(), key=lambda k: (k.due_at is None, k.due_at or now, k.name))
    course = can_see_course(p)
    return KindsView(kinds=[deadlines.out(k, p.user, course, now) for k in rows], limits=limits_of(db, p.user, svc.settings, deadlines))


@router.get("/limits", response_model=Limits)
def limits(p: CurrentUser, db: SessionDep, svc: ServicesDep) -> Limits:
    return limits_of(db, p.user, svc.settings, Deadlines(db, svc.settings))


@router.put("/admin/kinds/{kind}", response_model=KindOut)
def set_kind(kind: str, body: KindIn, p: InstructorUser, db: SessionDep, svc: ServicesDep) -> KindOut:
    """Create a kind or change what the body gives (dates, late policy and window, grade rule)."""
    created = db.get(Kind, kind) is None
    row = update_kind(db, kind, body, create=True)
    audit(db, p.user.username, "kind.create" if created else "kind.change", kind, **body.model_dump(mode="json", exclude_unset=True))
    db.commit()
    return Deadlines(db, svc.settings).out(row, p.user, True, utcnow())


@router.delete("/admin/kinds/{kind}")
def remove_kind(kind: str, p: InstructorUser, db: SessionDep) -> dict[str, str]:
    """No new submission of the kind is accepted; its runs stay. A kind with runs cannot go."""
    row = kind_row(db, kind)
    if db.scalar(select(Job.id).where(Job.kind == kind).limit(1)) is not None:
        raise Invalid(f"'{kind}' has runs; close it instead (raiclient admin kinds set {kind} --due …)")
    db.execute(delete(Extension).where(Extension.kind == kind))
    db.delete(row)
    audit(db, p.user.username, "kind.remove", kind)
    db.commit()
    return {"removed": kind}


@router.post("/admin/kinds/{kind}/extensions", response_model=ExtensionOut)
def extend(kind: str, body: ExtensionIn, p: InstructorUser, db: SessionDep) -> ExtensionOut:
    """A later deadline for one student or team (replacing theirs, if any)."""
    ext = grant(db, kind, body, p.user.username)
    audit(db, p.user.username, "kind.extend", kind, username=ext.username, team=ext.team, until=ext.due_at.isoformat(), reason=ext.reason)
    db.commit()
    return extension_out(ext)


@router.get("/admin/kinds/{kind}/extensions", response_model=list[ExtensionOut])
def extensions(kind: str, _: StaffUser, db: SessionDep) -> list[ExtensionOut]:
    kind_row(db, kind)
    rows = db.scalars(select(Extension).where(Extension.kind == kind).order_by(Extension.username, Extension.team))
    return [extension_out(e) for e in rows]


@router.delete("/admin/kinds/{kind}/extensions", response_model=ExtensionOut)
def revoke_extension(
    *,
    kind: str,
    username: str | None = Query(None, max_length=64),
    team: str | None = Query(None, max_length=128),
    p: InstructorUser,
    db: SessionDep,
) -> ExtensionOut:
    ext = end_extension(db, kind, username, team)
    out = extension_out(ext)
    db.delete(ext)
    audit(db, p.user.username, "kind.unextend", kind, username=username, team=team)
    db.commit()
    return out
