"""The audit log: every state-changing action by staff, written in the same transaction."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from raiserver.store.tables import AuditEntry


def audit(db: Session, actor: str, action: str, target: str = "", **detail: Any) -> None:
    db.add(AuditEntry(actor=actor, action=action, target=target, detail=detail or None))
