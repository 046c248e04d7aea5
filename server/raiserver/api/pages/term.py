"""The term's web pages (issue 36): /kinds shows every kind as it applies to the viewer (their own
deadlines, their limits); instructors change kinds and grant extensions there with the same rules
and audit as ``raiclient admin kinds``. A refused change shows the page again with its one line."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import APIRouter, Form, Query, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import BaseModel, ValidationError, create_model
from pydantic import Field as PydanticField
from sqlalchemy import select
from sqlalchemy.orm import Session

from raiprotocol.graderules import PARAMS, RULES, label, scope
from raiprotocol.models import ExtensionIn, GradeRule, KindIn
from raiserver.access.audit import audit
from raiserver.access.csrf import check_csrf
from raiserver.access.permissions import Principal, can_manage_course, can_see_course
from raiserver.api.deps import ServicesDep, SessionDep, WebGradesViewer, WebInstructor, WebUser
from raiserver.api.pages.site import FORM_EXPIRED, render
from raiserver.api.routes.grades import grade_sheet
from raiserver.errors import DomainError
from raiserver.grading.kinds import Deadlines, end_extension, grant, update_kind
from raiserver.jobs.quotas import limits_of
from raiserver.store.db import utcnow
from raiserver.store.tables import Extension

router = APIRouter(include_in_schema=False)
Field = Annotated[str, Form(max_length=256)]


def kinds_page(request: Request, p: Principal, db: Session, svc: ServicesDep, error: str | None = None, code: int = 200) -> HTMLResponse:
    deadlines = Deadlines(db, svc.settings)
    now = utcnow()
    rows = sorted(deadlines.kinds.values(), key=lambda k: (k.due_at is None, k.due_at or now, k.name))
    exts = list(db.scalars(select(Extension).order_by(Extension.kind, Extension.username, Extension.team))) if can_see_course(p) else []
    response = render(
        request,
        "kinds.html",
        p,
        kinds=[deadlines.out(k, p.user, can_see_course(p), now) for k in rows],
        limits=limits_of(db, p.user, svc.settings, deadlines),
        extensions=exts,
        manage=can_manage_course(p),
        error=error,
        grade_rules=RULES,
        rule_fields=[(name, _label(name), param.shown) for name, param in PARAMS.items()],
    )
    response.status_code = code
    return response


def _label(param: str) -> str:
    """A grade rule's number as the form says it: "linear: op time (s) that earns 0"; every rule's
    own, such as "Full marks", without the rule's name."""
    says = PARAMS[param].says
    return says[0].upper() + says[1:] if scope(param) == "grade rule" else label(param)


@router.get("/kinds")
def kinds(request: Request, p: WebUser, db: SessionDep, svc: ServicesDep) -> HTMLResponse:
    return kinds_page(request, p, db, svc)


@router.post("/kinds")
def change_kind(
    request: Request,
    p: WebInstructor,
    db: SessionDep,
    svc: ServicesDep,
    csrf: Annotated[str, Form()],
    name: Field,
    opens: Field = "",
    due: Field = "",
    late_policy: Field = "",
    late_hours: Field = "",
) -> Response:
    """Create a kind or change it, as ``raiclient admin kinds set``: an empty field leaves it as it
    is, "none" clears a date (and 0 the late window's end)."""
    check_csrf(request, csrf, FORM_EXPIRED)
    fields: dict[str, object] = {k: v.strip() for k, v in (("opens", opens), ("due", due), ("late_policy", late_policy)) if v.strip()}
    try:
        if late_hours.strip():
            fields["late_hours"] = float(late_hours)
        change = KindIn.model_validate(fields)
        update_kind(db, name.strip(), change, create=True)
    except (ValueError, DomainError) as exc:
        db.rollback()
        return kinds_page(request, p, db, svc, _line(exc), 400)
    audit(db, p.user.username, "kind.change", name.strip(), **change.model_dump(mode="json", exclude_unset=True), via="web")
    db.commit()
    return RedirectResponse("/kinds", status.HTTP_303_SEE_OTHER)


def _rule_form() -> type[BaseModel]:
    """The grade rule form's fields: the kind, the rule and every number of raiprotocol.graderules
    (as text, as the form sends them; empty: the rule's default)."""
    numbers: dict[str, Any] = {name: (str, PydanticField(param.shown, max_length=256)) for name, param in PARAMS.items()}
    text = (str, PydanticField(max_length=256))
    return create_model("RuleForm", csrf=(str, ...), kind=text, rule=text, **numbers)


if TYPE_CHECKING:
    RuleForm = BaseModel
else:
    RuleForm = _rule_form()


@router.post("/kinds/grading")
def set_rule(
    request: Request,
    p: WebInstructor,
    db: SessionDep,
    svc: ServicesDep,
    form: Annotated[RuleForm, Form()],
) -> Response:
    """A kind's grade rule, as ``raiclient admin kinds set KIND --grade …`` sets it."""
    sent: dict[str, str] = form.model_dump()
    check_csrf(request, sent["csrf"], FORM_EXPIRED)
    kind = sent["kind"]
    try:
        given = {name: float(sent[name]) for name in PARAMS if sent[name].strip()}
        change = KindIn(grading=GradeRule(rule=sent["rule"], **given))
        update_kind(db, kind.strip(), change, create=False)
    except (ValueError, DomainError) as exc:
        db.rollback()
        return kinds_page(request, p, db, svc, _line(exc), 400)
    audit(db, p.user.username, "kind.change", kind.strip(), grading=change.model_dump(mode="json")["grading"], via="web")
    db.commit()
    return RedirectResponse("/kinds", status.HTTP_303_SEE_OTHER)


@router.post("/kinds/extensions")
def extend(
    request: Request,
    p: WebInstructor,
    db: SessionDep,
    svc: ServicesDep,
    csrf: Annotated[str, Form()],
    kind: Field,
    who: Field,
    until: Field = "",
    hours: Field = "",
    reason: Field = "",
) -> Response:
    """``who``: a username, or "team NAME"."""
    check_csrf(request, csrf, FORM_EXPIRED)
    try:
        team = who.strip()[5:].strip() if who.strip().startswith("team ") else None
        body = ExtensionIn(
            username=None if team else who.strip(),
            team=team,
            until=until.strip() or None,
            hours=float(hours) if hours.strip() else None,
            reason=reason,
        )
        ext = grant(db, kind.strip(), body, p.user.username)
    except (ValueError, DomainError) as exc:
        db.rollback()
        return kinds_page(request, p, db, svc, _line(exc), 400)
    audit(
        db,
        p.user.username,
        "kind.extend",
        ext.kind,
        username=ext.username,
        team=ext.team,
        until=ext.due_at.isoformat(),
        reason=ext.reason,
        via="web",
    )
    db.commit()
    return RedirectResponse("/kinds", status.HTTP_303_SEE_OTHER)


@router.get("/grades/{kind}.csv")
def grades_download(
    *,
    kind: str,
    request: Request,
    fmt: Literal["csv", "canvas"] = Query("csv", alias="format"),
    p: WebGradesViewer,
    db: SessionDep,
    svc: ServicesDep,
) -> Response:
    """The grade sheet from the Deadlines page (staff)."""
    return grade_sheet(request, db, svc, kind, fmt, None, p.user.username, "web")


@router.post("/kinds/extensions/end")
def end(
    request: Request,
    p: WebInstructor,
    db: SessionDep,
    svc: ServicesDep,
    csrf: Annotated[str, Form()],
    kind: Field,
    username: Field = "",
    team: Field = "",
) -> Response:
    """End one extension: the kind's own deadline applies to them again."""
    check_csrf(request, csrf, FORM_EXPIRED)
    try:
        end_extension(db, kind, username or None, team or None)
    except DomainError as exc:
        db.rollback()
        return kinds_page(request, p, db, svc, _line(exc), 400)
    audit(db, p.user.username, "kind.unextend", kind, username=username or None, team=team or None, via="web")
    db.commit()
    return RedirectResponse("/kinds", status.HTTP_303_SEE_OTHER)


def _line(exc: Exception) -> str:
    """The one line a refused form shows."""
    if isinstance(exc, ValidationError):
        e = exc.errors()[0]
        return f"{'.'.join(str(x) for x in e.get('loc', ()))}: {e.get('msg')}"
    if isinstance(exc, DomainError):
        return str(exc).splitlines()[0]
    return f"not a number: {str(exc).splitlines()[0]}" if "float" in str(exc) else str(exc).splitlines()[0]
