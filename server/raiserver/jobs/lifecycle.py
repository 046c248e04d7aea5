"""A job's life: queued → running → succeeded | failed | timed_out | cancelled | error.

Every change goes through here and is committed before anyone is told (log end marker, API), so
the database always holds the truth. Each run of a job is one attempt, and only the current
attempt may write: its claim, lease, state changes and build folder are checked against the
database, its log lines against the job's fence in Redis (``raiprotocol.keys.fence_key``), which
follows every change of attempt made here and turns to "end" before the log is stored. A run holds
a lease its worker renews; the job goes to another worker only once the lease lapsed by a margin
(the run stopped itself by then), never because the server itself was not running to hear it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

import redis
from sqlalchemy import select
from sqlalchemy.orm import Session
from ulid import ULID

from raiprotocol.models import Claim, ClaimGranted, JobState, JobUpdate, TimedRun
from raiprotocol.spec import BuildSpec, CourseSpec
from raiserver.access.audit import audit
from raiserver.config import Settings
from raiserver.errors import Conflict, Invalid, Missing, NotFound
from raiserver.grading.course import spec_of
from raiserver.grading.kinds import Admission, in_words, when
from raiserver.jobs.fairshare import fair_order, free_slots, queues_with_work
from raiserver.jobs.finish import Outcome, finish_job
from raiserver.jobs.transitions import CLAIM, REQUEUE, fence, move
from raiserver.parts import Services
from raiserver.store.db import Database, utcnow
from raiserver.store.tables import CourseBuild, Job, User, Worker

log = logging.getLogger("raiserver")


def add_phase(job: Job, name: str, detail: str | None = None) -> None:
    """Note when a step of the job happened (a new list: the JSON column sees the change)."""
    job.phases = [*(job.phases or []), {"name": name, "at": utcnow().isoformat(), "detail": detail}]


def runs_alone(settings: Settings, kind: str, spec: BuildSpec, ranked: bool) -> bool:
    """Whether a job has its host and GPUs alone: a ranked run (timed by the course's build file), a
    kind whose timing is repeated, or a build file that asks for it. Of these only ranked runs are
    released on the hosts' reserved places (``Job.reserved``): the others are the student's choice."""
    repeated = kind in settings.repeat_kinds and settings.timing_repeats > 1
    return ranked or repeated or spec.resources.gpu.exclusive


def create_job(
    db: Session,
    svc: Services,
    owner: User,
    spec: BuildSpec,
    spec_text: str,
    sha256: str,
    size: int,
    queue: str,
    kind: str,
    course: CourseBuild | None = None,
    admission: Admission | None = None,
    submit_key: str | None = None,
) -> Job:
    """A new queued job; ``admission``: what its kind's deadline made of it (late, late days drawn);
    ``submit_key``: the client's key for this submission (a retry with it finds this job)."""
    job = Job(
        id=str(ULID()),
        owner_id=owner.id,
        queue=queue,
        kind=kind,
        state=JobState.queued,
        image=spec.image,
        spec_yaml=spec_text,
        archive_sha256=sha256,
        archive_bytes=size,
        gpu_count=spec.gpu_count,
        attempt=1,
        course_build_id=course.id if course is not None else None,
        late_days=admission.late_days if admission is not None else 0,
        reserved=course is not None,
        submit_key=submit_key,
    )
    job.wall_seconds = job.build_spec().resources.limits.wall_seconds or 0  # the course's file for a ranked run
    db.add(job)
    db.commit()
    s = svc.settings
    if course is not None:
        files = ", ".join(spec_of(course).ranked.student_files)
        svc.logs.system(
            job.id,
            f"A ranked '{kind}' run: built and timed by the course's build file (version {course.version}); "
            f"your rai_build.yml is not used, only your {files}",
        )
    elif kind in s.ranked_kind_set:
        svc.logs.system(
            job.id,
            f"The course has not installed its build file for '{kind}' yet: this run is kept "
            "but does not rank (only runs the service builds and measures itself rank)",
        )
    if admission is not None and admission.late is not None and admission.due is not None:
        if not admission.counts:
            what = "does not rank" if kind in s.ranked_kind_set else f"is marked late ({in_words(admission.late)})"
            svc.logs.system(job.id, f"Submitted after the deadline ({when(admission.due)}): this '{kind}' run is kept but {what}")
        else:
            svc.logs.system(
                job.id,
                f"Submitted {in_words(admission.late)} after the deadline ({when(admission.due)}): "
                f"{job.late_days} late day(s) drawn for it",
            )
    svc.kick()
    return job


def remeasure(db: Session, svc: Services, original: Job, by: User, repeats: int) -> Job:
    """Staff ask for a ranked entry to be measured again (issue 32): a new job with the same archive
    and course build, ``repeats`` timed runs alone on an idle host, ahead of the queue; audited. Once
    it ends its result replaces the original's on the board (leaderboard.board_run)."""
    if original.course_build_id is None:
        raise Invalid("only a ranked run (one the course's build file built and timed) can be measured again")
    if not original.state.finished:
        raise Conflict(f"job {original.id} has not ended yet")
    if not svc.storage.archive_path(original.archive_sha256).exists():
        raise Missing("the project archive of that run is no longer kept")
    job = _again(original, remeasure_of=original.id, repeats=repeats, reserved=True)
    db.add(job)
    audit(db, by.username, "job.remeasure", original.id, new_job=job.id, repeats=repeats, owner=original.owner.username)
    db.commit()
    svc.logs.system(
        job.id,
        f"A re-measure of job {original.id}, asked for by {by.username}: the same files and course build, "
        f"{repeats} timed runs on an idle GPU; its result replaces that run's on the board",
    )
    svc.kick()
    return job


def _again(original: Job, remeasure_of: str | None, repeats: int | None, reserved: bool) -> Job:
    """A new queued job of the original's owner, kind, queue, image, build file and archive, keeping
    its submission time (its deadline judged as the original's was): a re-measure's or a re-run's."""
    return Job(
        id=str(ULID()),
        owner_id=original.owner_id,
        queue=original.queue,
        kind=original.kind,
        state=JobState.queued,
        image=original.image,
        spec_yaml=original.spec_yaml,
        archive_sha256=original.archive_sha256,
        archive_bytes=original.archive_bytes,
        gpu_count=original.gpu_count,
        attempt=1,
        course_build_id=original.course_build_id,
        remeasure_of=remeasure_of,
        repeats=repeats,
        reserved=reserved,
        created_at=original.created_at,
        wall_seconds=original.wall_seconds,
    )


def rerun(db: Session, svc: Services, original: Job, by: User) -> Job:
    """Staff run an ended job again (issue 49: a run lost to a broken host, a bad image, a course
    file fixed since): a new job of the same owner, kind, queue, build file and archive, audited
    with who asked. It keeps the original's submission time, so its deadline is judged as that
    run's was and no late day is drawn again; a ranked run is built and timed as the original was."""
    if not original.state.finished:
        raise Conflict(f"job {original.id} has not ended yet; cancel it first to run it again")
    if not original.archive_kept or not svc.storage.archive_path(original.archive_sha256).exists():
        raise Missing(f"the project archive of job {original.id} is no longer kept, so it cannot run again")
    job = _again(original, remeasure_of=original.remeasure_of, repeats=original.repeats, reserved=original.reserved)
    db.add(job)
    audit(db, by.username, "job.rerun", original.id, new_job=job.id, owner=original.owner.username, kind=original.kind)
    db.commit()
    svc.logs.system(
        job.id,
        f"A re-run of job {original.id}, asked for by {by.username}: the same project archive and build file; "
        f"it keeps that job's submission time ({original.created_at:%Y-%m-%d %H:%M:%S} UTC)",
    )
    svc.kick()
    return job


def cancel_job(db: Session, svc: Services, job: Job, by: User) -> None:
    if job.state.finished:
        return
    if job.state == JobState.queued:
        if by.id != job.owner_id:
            audit(db, by.username, "job.cancel", job.id, owner=job.owner.username)
        finish_job(db, svc, job, Outcome(JobState.cancelled, message=f"Cancelled by {by.username} before it started"))
        return
    job.cancel_requested = True
    if by.id != job.owner_id:
        audit(db, by.username, "job.cancel", job.id, owner=job.owner.username)
    db.commit()
    svc.cancels.request(job.id)
    svc.logs.system(job.id, f"Cancel requested by {by.username}; stopping its commands")


def claim_job(db: Session, svc: Services, job_id: str, claim: Claim) -> ClaimGranted:
    job = db.get(Job, job_id, with_for_update=True)
    if job is None:
        raise NotFound("no such job")
    if job.state.finished:
        raise Conflict(f"job already {job.state.value}")
    if claim.attempt != job.attempt:
        raise Conflict(f"stale delivery: attempt {claim.attempt}, job is on attempt {job.attempt}")
    if job.state == JobState.running:
        # the same worker's pool process died with the run (its container goes before the new
        # run starts); another worker only once the run's lease lapsed (it has stopped itself)
        if job.worker != claim.worker and not lease_lapsed(svc, job, utcnow()):
            raise Conflict(f"job is running on {job.worker}")
        job.attempt += 1  # a new run: the lost one, should it write again, is refused
        svc.logs.system(job.id, f"Restarting on {claim.worker} as attempt {job.attempt} (the previous run on {job.worker} was lost)")
    move(job, CLAIM, JobState.running)
    job.waiting = None
    job.worker = claim.worker
    job.started_at = job.started_at or utcnow()
    job.claimed_at = job.lease_at = utcnow()
    add_phase(job, "claimed", claim.worker)
    w = db.get(Worker, claim.worker)
    if w is not None:
        w.last_seen = utcnow()
        if job.gpu_count and w.gpus:
            job.gpu_name = w.gpus[0].get("name")
    db.commit()
    fence(svc, job)
    s = svc.settings
    spec = job.build_spec()
    course_spec = spec if isinstance(spec, CourseSpec) else None
    limits = spec.resources.limits
    repeats = max(1, s.timing_repeats) if job.kind in s.repeat_kinds else 1
    timed = None
    if course_spec is not None:  # the course's file: its timed command, measured, alone on the host
        ranked = course_spec.ranked
        runs = job.repeats or ranked.repeats
        timed = TimedRun(
            command=ranked.timed,
            repeats=runs,
            passes=ranked.passes,
            measure=ranked.measure,
            reference=ranked.reference or "",
            keep=ranked.keep,
            bound_seconds=ranked.timed_seconds,
            cpu_seconds=ranked.cpu_seconds,
            forbid=ranked.forbid or [],
            build_files=ranked.build_files,
            profile=ranked.profile or "",
        )
        repeats = 1
    return ClaimGranted(
        job_id=job.id,
        attempt=job.attempt,
        image=job.image,
        commands=spec.commands.build,
        gpu_count=job.gpu_count,
        exclusive=job.reserved or runs_alone(s, job.kind, spec, ranked=timed is not None),
        timed=timed,
        repeat_timing=repeats,
        wall_seconds=job.wall_limit(s.wall_seconds),
        command_seconds=limits.command_seconds,
        memory_mb=min(limits.memory_mb or s.memory_mb, s.memory_mb),
        archive_sha256=job.archive_sha256,
        max_build_bytes=s.max_build_bytes,
        queue=job.queue,
    )


def update_job(db: Session, svc: Services, job_id: str, update: JobUpdate, worker: str | None = None) -> Job:
    job = db.get(Job, job_id, with_for_update=True)
    if job is None:
        raise NotFound("no such job")
    if _late_end(job, update):  # its run ended before the server, stalled or cut off, heard it
        rerun = f"; attempt {job.attempt} on {job.worker} is stopped" if job.state is JobState.running else ""
        svc.logs.system(
            job.id,
            f"The run of attempt {update.attempt} had ended after all ({update.state.value}): "
            f"its result is kept and the job does not run again{rerun}",
        )
        job.attempt = update.attempt
    elif update.attempt != job.attempt or job.state.finished:
        raise Conflict(f"job {job.id} is {job.state.value} on attempt {job.attempt}; this update is stale")
    if update.phases:
        job.phases = [*(job.phases or []), *(p.model_dump(mode="json") for p in update.phases[:1000])]
    if update.state is JobState.running:  # progress: waiting in the batch system, or started there
        job.waiting = update.waiting[:500] if update.waiting else None
        db.commit()
    elif update.state is JobState.queued:  # the worker lost the job's environment (a batch node failed)
        requeue_lost(db, svc, job, update.message or f"{job.worker} lost the job")
    elif update.state.finished:
        state = update.state
        if job.cancel_requested and state in (JobState.failed, JobState.error):
            state = JobState.cancelled  # killed because of the cancel, not of its own accord
        outcome = Outcome(
            state,
            update.exit_code,
            update.failed_command,
            update.message,
            measured=update.measured,
            run_attempt=update.attempt,
            gpu_shared_with=update.gpu_shared_with,
        )
        finish_job(db, svc, job, outcome, announce=False)
    return job


# what a run's program made of the job: a late report of one of these is kept (an error is the
# worker's or the server's trouble, which the rerun may not have)
_VERDICTS = (JobState.succeeded, JobState.failed, JobState.timed_out)


def _late_end(job: Job, update: JobUpdate) -> bool:
    """The end report of the attempt just before the job's, which was put back in the queue: that
    run ended whole (a run still writing when it was superseded is refused its next line and never
    reports an end; one its lease's watcher stopped reports a restart), so its result is kept, not
    run again. If the rerun already started (the worker was frozen or cut off between its
    command's end and its report), the program's own verdict still stands and the rerun is stopped:
    its next renewal is refused (issue 51)."""
    if not update.state.finished or update.attempt != job.attempt - 1 or job.cancel_requested:
        return False
    if job.state is JobState.queued and job.worker is None:
        return True
    return job.state is JobState.running and update.state in _VERDICTS


def renew_lease(db: Session, svc: Services, job_id: str, worker: str, attempt: int) -> bool:
    """The run of ``attempt`` on ``worker`` still holds the job; returns whether it was cancelled.
    Conflict once it does not (another attempt owns the job, or it ended): the run stops."""
    job = db.get(Job, job_id)
    if job is None:
        raise NotFound("no such job")
    if job.state.finished:
        raise Conflict(f"job already {job.state.value}")
    if job.attempt != attempt or job.worker != worker or job.state is not JobState.running:
        raise Conflict(f"superseded: the job is on attempt {job.attempt} ({job.state.value}{f' on {job.worker}' if job.worker else ''})")
    job.lease_at = utcnow()
    db.commit()
    return job.cancel_requested


def requeue_lost(db: Session, svc: Services, job: Job, reason: str) -> None:
    """The worker holding this job is gone: run it again elsewhere, up to max_attempts."""
    if job.cancel_requested:
        finish_job(db, svc, job, Outcome(JobState.cancelled, message=f"{reason}; the job had been cancelled"))
        return
    if job.attempt >= svc.settings.max_attempts:
        finish_job(db, svc, job, Outcome(JobState.error, message=f"{reason}; gave up after {job.attempt} attempts"))
        return
    job.attempt += 1
    move(job, REQUEUE, JobState.queued)
    job.waiting = None
    job.worker = None
    job.released_at = None
    db.commit()
    fence(svc, job)
    svc.logs.system(job.id, f"{reason}; the job goes back in the queue (attempt {job.attempt} of {svc.settings.max_attempts})")


CLAIM_GRACE = timedelta(seconds=10)  # a heartbeat listed before a claim arrives after it: no false alarm


def reconcile(db: Session, svc: Services, worker: str, running: list[str]) -> int:
    """Jobs the database has running on this worker that its heartbeat does not list (it
    restarted under the same name, or lost the run): back in the queue at once, not when the
    heartbeats stop (a worker restarted within a second never stops them). Returns how many."""
    listed = set(running)
    held = db.scalars(select(Job).where(Job.state == JobState.running, Job.worker == worker)).all()
    now, n = utcnow(), 0
    for job in held:
        claimed = job.last_claimed()
        if job.id in listed or (claimed is not None and now - claimed < CLAIM_GRACE):
            continue
        requeue_lost(db, svc, job, f"Worker {worker} is no longer running the job (it restarted or lost the run)")
        n += 1
    return n


def lease_window(svc: Services) -> timedelta:
    """How long a run's lease holds without renewal, and the margin after it: by then the run
    has stopped itself (it stops at worker_dead_after without a renewal it sent)."""
    return timedelta(seconds=svc.settings.worker_dead_after + svc.settings.lease_margin)


def lease_lapsed(svc: Services, job: Job, now: datetime, awake_since: datetime | None = None) -> bool:
    """Neither channel renewed the run's lease within the window, and the server was awake to hear
    it for that long (a server that was stopped gives every run a fresh window)."""
    window = lease_window(svc)
    if awake_since is not None and now - awake_since < window:
        return False
    renewed = job.lease_at or job.last_claimed() or job.started_at
    if renewed is not None and now - renewed < window:
        return False
    try:
        return job.id not in svc.leases.held([job.id])
    except redis.RedisError:
        return False  # cannot tell: wait for the next pass


def reap(db: Session, svc: Services, awake_since: datetime | None = None) -> int:
    """Requeue running jobs whose run's lease lapsed (its worker stopped, or was cut off and has
    stopped the run itself). ``awake_since``: when the reaper last resumed after not running for a
    while (the server stopped, Redis away): no lease is judged before a full window after it.
    Returns how many."""
    now, window = utcnow(), lease_window(svc)
    if awake_since is not None and now - awake_since < window:
        return 0
    running = db.scalars(select(Job).where(Job.state == JobState.running)).all()
    quiet = [j for j in running if j.worker is None or now - (j.lease_at or j.last_claimed() or now - window) >= window]
    if not quiet:
        return 0
    held = svc.leases.held([j.id for j in quiet])  # a Redis error fails the pass: nothing requeued
    n = 0
    for job in quiet:
        if job.id in held:
            continue
        requeue_lost(db, svc, job, f"Worker {job.worker} stopped answering")  # no lease renewed, on either channel
        n += 1
    return n


def restore_fences(db: Session, svc: Services) -> int:
    """Put back the fences Redis lost (a flush, a wiped Redis) for the jobs a worker may hold:
    raised from the database, never lowered. Returns how many jobs were checked."""
    rows = db.execute(
        select(Job.id, Job.attempt).where((Job.state == JobState.running) | ((Job.state == JobState.queued) & Job.released_at.is_not(None)))
    ).all()
    svc.fences.restore(dict(rows), svc.settings.visibility_timeout)
    return len(rows)


def release_jobs(
    db: Session, send: Callable[[Job], object], dead_after: float, staff_priority: bool = True, priority_kinds: set[str] | None = None
) -> int:
    """Release as many jobs as there are free slots, in fair order (``fairshare``): shared jobs on
    the queue's slots, ranked runs on the hosts' reserved places. ``send(job)`` hands one to Celery."""
    released = 0
    for queue in queues_with_work(db):
        free, reserved = free_slots(db, queue, dead_after)
        if free <= 0 and reserved <= 0:
            continue
        for job in fair_order(db, queue, staff_priority, priority_kinds):
            if job.reserved:
                if reserved <= 0:
                    continue
                reserved -= 1
            else:
                if free <= 0:
                    continue
                free -= 1
            job.released_at = utcnow()
            db.commit()  # durable before the message exists: a crash here leaves it for jobs.release_again
            send(job)
            released += 1
            if free <= 0 and reserved <= 0:
                break
    return released


def release_again(db: Session, svc: Services) -> int:
    """A released job nobody claimed within ``release_again_seconds`` (its Celery message was
    lost: the worker that took it died, Redis lost it): release it again under a new attempt
    number, so the lost message, should it reappear, is refused. Returns how many."""
    cutoff = utcnow() - timedelta(seconds=svc.settings.release_again_seconds)
    stale = db.scalars(select(Job).where(Job.state == JobState.queued, Job.released_at.is_not(None), Job.released_at < cutoff)).all()
    for job in stale:
        job.attempt += 1
        job.released_at = None
    db.commit()
    for job in stale:
        fence(svc, job)
    return len(stale)


def check_build_attempt(db: Database, job_id: str, attempt: int, late_ok: bool = False) -> None:
    """A worker may upload a job's build folder only for the attempt that is still running (and,
    ``late_ok``, its copy of the log also for a run whose end report will be kept late: _late_end)."""
    with db.session() as s:
        job = s.get(Job, job_id)
        if job is None:
            raise NotFound("no such job")
        late = late_ok and job.state is JobState.queued and job.worker is None and attempt == job.attempt - 1
        if (job.attempt != attempt or job.state.finished) and not late:
            raise Conflict("stale attempt")


def note_build(db: Database, job_id: str, size: int) -> None:
    """The build folder is stored: the job's timeline and its size say so."""
    with db.session() as s:
        job = s.get(Job, job_id)
        if job is not None:
            add_phase(job, "build uploaded", f"{size} bytes")
            job.build_bytes = size
