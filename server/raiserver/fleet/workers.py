"""The fleet of workers, from their heartbeats: which are alive (the one place that decides),
which queues exist, and whether any live worker on a queue can run what a build file asks for
(GPU count, GPU model, image)."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from raiprotocol.models import Heartbeat, ImageOffer, QueueImages
from raiprotocol.spec import BuildSpec, normalize_image
from raiserver.errors import Invalid
from raiserver.store.db import utcnow
from raiserver.store.tables import Worker


def record_heartbeat(db: Session, hb: Heartbeat) -> Worker:
    """What a worker says of itself every few seconds, kept (a new name is a new worker)."""
    w = db.get(Worker, hb.name)
    if w is None:
        w = Worker(name=hb.name)
        db.add(w)
    w.queues, w.executor, w.slots, w.busy = hb.queues, hb.executor, hb.slots, hb.busy
    w.gpus = [g.model_dump() for g in hb.gpus]
    w.running, w.version, w.last_seen = hb.running, hb.version, utcnow()
    w.images = None if hb.images is None else sorted({normalize_image(i) for i in hb.images})
    w.pulls = dict(hb.pulls) or None
    w.arch = hb.arch
    db.commit()
    return w


def is_alive(w: Worker, dead_after: float, now: datetime | None = None) -> bool:
    """A worker is alive while its last heartbeat is younger than ``worker_dead_after``."""
    return ((now or utcnow()) - w.last_seen).total_seconds() < dead_after


def live_workers(db: Session, dead_after: float, queue: str | None = None) -> list[Worker]:
    cutoff = utcnow() - timedelta(seconds=dead_after)
    rows = db.scalars(select(Worker).where(Worker.last_seen > cutoff).order_by(Worker.name))
    return [w for w in rows if queue is None or queue in (w.queues or [])]


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
        raise Invalid(f"unknown queue '{queue}'; the queues are: {', '.join(queues)}")


def check_image(image: str, queue: str, allowed: list[str] | None) -> None:
    """``allowed``: the images the operator allows on the queue (``Settings.images_allowed_on``), None for any."""
    if allowed is not None and image not in allowed:
        raise Invalid(f"rai_build.yml: image '{image}' is not allowed on queue '{queue}'; use one of: {', '.join(allowed) or '(none)'}")


def queue_images(db: Session, dead_after: float) -> list[QueueImages]:
    """Per queue: the images its live workers hold (and how many hold each), and pulls under way."""
    by_queue: dict[str, list[Worker]] = defaultdict(list)
    for w in live_workers(db, dead_after):
        for q in w.queues or []:
            by_queue[q].append(w)
    out = []
    for queue, workers in sorted(by_queue.items()):
        held: dict[str, int] = defaultdict(int)
        pulling: dict[str, list[str]] = defaultdict(list)
        for w in workers:
            for image in w.images or []:
                held[image] += 1
            for image, what in (w.pulls or {}).items():
                pulling[image].append(what)
        out.append(
            QueueImages(
                queue=queue,
                workers=len(workers),
                any_image=any(w.images is None for w in workers),
                images=[ImageOffer(image=i, workers=n) for i, n in sorted(held.items())],
                pulling={
                    i: (f"pulling on {whats.count('pulling')} worker(s)" if "pulling" in whats else whats[-1])
                    for i, whats in sorted(pulling.items())
                },
            )
        )
    return out


def check_requirements(db: Session, queue: str, spec: BuildSpec, dead_after: float) -> None:
    """Refuse at once what no live worker of the queue can run (instead of a job that waits for ever
    or fails on a worker minutes later), naming every unmet requirement together and what the
    workers have; with no live worker at all the job is accepted and waits."""
    live = live_workers(db, dead_after, queue)
    if not live:
        return
    unmet = []
    want, arch = spec.resources.gpu.count, spec.resources.gpu.architecture
    if want or arch:

        def fits(w: Worker) -> bool:
            gpus = [g for g in w.gpus or [] if not arch or arch.lower() in str(g.get("name", "")).lower()]
            return len(gpus) >= want

        if not any(fits(w) for w in live):
            what = f"{want} GPU{'s' if want != 1 else ''}" + (f" of model '{arch}'" if arch else "")
            unmet.append(f"{what} ({'; '.join(f'{w.name} has {_gpus_in_words(w)}' for w in live)})")
    cpu = spec.resources.cpu.architecture
    if not any((w.arch or "amd64") == cpu for w in live):
        archs = "; ".join(f"{w.name} is {w.arch or 'amd64'}" for w in live)
        unmet.append(f"CPU architecture {cpu} ({archs})")
    if not any(w.images is None for w in live):
        held = sorted({i for w in live for i in w.images or []})
        if normalize_image(spec.image) not in held:
            unmet.append(f"image '{spec.image}' (the workers have {', '.join(held) or 'no image'}; see 'raiclient images')")
    if unmet:
        raise Invalid(f"rai_build.yml asks for what no worker of queue '{queue}' offers: " + "; and ".join(unmet))


def _gpus_in_words(w: Worker) -> str:
    names = [str(g.get("name", "?")) for g in w.gpus or []]
    if not names:
        return "no GPU"
    return ", ".join(f"{names.count(n)} × {n}" for n in sorted(set(names)))
