"""The FastAPI dependencies route handlers declare, as annotated types (``db: SessionDep``,
``p: CurrentUser``): who is calling, with which rights, the request's database session and the
app's services (``services``). One place, so a handler's signature says what it needs and nothing else."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from sqlalchemy.orm import Session

from ..auth import Principal, current_user, get_db, require_staff
from ..jobs import Services
from ..permissions import is_instructor


def services(request: Request) -> Services:
    return request.app.state.services


def require_instructor(p: Principal = Depends(require_staff)) -> Principal:
    if not is_instructor(p.user.role):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "instructors and admins only")
    return p


SessionDep = Annotated[Session, Depends(get_db)]
CurrentUser = Annotated[Principal, Depends(current_user)]
StaffUser = Annotated[Principal, Depends(require_staff)]
InstructorUser = Annotated[Principal, Depends(require_instructor)]
