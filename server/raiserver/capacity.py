"""What the workers offer, from their heartbeats: which queues exist, and whether any live
worker on a queue can run what a build file asks for (GPU count, GPU model)."""

from __future__ import annotations

from datetime import timedelta

from fastapi import HTTPException, status
from sqlalchemy import select
from sqlalchemy.orm import Session

from raiclient.spec import BuildSpec

from .db import utcnow
from .tables import Worker


def known_queues(db: Session, default_queue: str) -> list[str]:
    """Queues that a worker served in the last day, plus the default one (which jobs may await)."""
    cutoff = utcnow() - timedelta(days=1)
    queues = {default_queue}
    for w in db.scalars(select(Worker).where(Worker.last_seen > cutoff)):
        queues.update(w.queues or [])
    return sorted(queues)


def check_queue(db: Session, queue: str, default_queue: str) -> None:
    queues = known_queues(db, default_queue)
    if queue not in queues:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_ENTITY, f"unknown queue '{queue}'; the queues are: {', '.join(queues)}")


def check_gpus(db: Session, queue: str, spec: BuildSpec, dead_after: float) -> None:
    """Refuse a request that no live worker on the queue could ever run; with no live worker at all
    the job is accepted and waits."""
    want, arch = spec.resources.gpu.count, spec.resources.gpu.architecture
    if want == 0 and not arch:
        return
    cutoff = utcnow() - timedelta(seconds=dead_after)
    live = [w for w in db.scalars(select(Worker).where(Worker.last_seen > cutoff)) if queue in (w.queues or [])]
    if not live:
        return
    def fits(w: Worker) -> bool:
        gpus = [g for g in w.gpus or [] if not arch or arch.lower() in str(g.get("name", "")).lower()]
        return len(gpus) >= want
    if not any(fits(w) for w in live):
        offer = "; ".join(f"{w.name}: {len(w.gpus or [])} × {', '.join(sorted({g.get('name', '?') for g in w.gpus or []})) or 'no GPU'}"
                          for w in live)
        what = f"{want} GPU(s)" + (f" of architecture '{arch}'" if arch else "")
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_ENTITY, f"rai_build.yml asks for {what}; no worker on queue '{queue}' has that ({offer})")


def allowed_images(setting: str, queue: str) -> list[str] | None:
    """The images allowed on a queue, or None when any image is."""
    if not setting.strip():
        return None
    allowed: list[str] = []
    for entry in setting.split(";"):
        q, sep, images = entry.partition("=")
        if not sep:
            allowed += entry.split()
        elif q.strip() == queue:
            allowed += images.split()
    return allowed


def check_image(image: str, queue: str, setting: str) -> None:
    allowed = allowed_images(setting, queue)
    if allowed is not None and image not in allowed:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_ENTITY,
                            f"rai_build.yml: image '{image}' is not allowed on queue '{queue}'; use one of: {', '.join(allowed) or '(none)'}")
