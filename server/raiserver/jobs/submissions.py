"""Accepting a submission: everything between an upload's first byte and a queued job.

Checks run in the order that spares the student's time on bad Wi-Fi: size, queue, kind and quota
before a byte of the body is read; archive, build file, kind's files, image and GPUs after; the
quota again under the student's row lock, so concurrent uploads cannot both pass. Refusals are
``errors.DomainError``s; nothing refused leaves anything behind.

A submission may carry the client's key (``Idempotency-Key``, one per ``raiclient submit``): a
retry of an upload that landed (its answer lost to a server restart or a cut) gets the job it
made, before any check that job itself would now fail (the active-jobs quota), and again under the
row lock, so two uploads with one key make one job.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

from fastapi.concurrency import run_in_threadpool
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from raiprotocol.archive import ArchiveError, ArchiveLimits, inspect_archive
from raiprotocol.models import JobOut
from raiprotocol.project import SPEC_FILENAME, missing_for_kind
from raiprotocol.spec import BuildSpec, SpecError, parse_spec
from raiserver.access.uploadgate import UploadGate
from raiserver.errors import BadArchive, Invalid, TooLarge
from raiserver.fleet.workers import check_image, check_queue, check_requirements
from raiserver.grading.course import current as current_course
from raiserver.grading.course import spec_of, student_part
from raiserver.grading.kinds import Deadlines
from raiserver.jobs.lifecycle import create_job
from raiserver.jobs.quotas import check_quotas, check_ranked_rate
from raiserver.jobs.retention import check_storage
from raiserver.jobs.views import QueueView, job_out
from raiserver.parts import Services
from raiserver.store.db import Database, utcnow
from raiserver.store.storage import human_size, sha256_of
from raiserver.store.tables import Job, User

KIND = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
QUEUE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
SUBMIT_KEY = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")


def made_with(db: Session, user_id: int, submit_key: str | None) -> Job | None:
    """The job an earlier upload of this submission made, if one did."""
    if submit_key is None:
        return None
    return db.scalars(select(Job).where(Job.owner_id == user_id, Job.submit_key == submit_key)).first()


async def accept_submission(
    svc: Services,
    database: Database,
    body: AsyncIterator[bytes],
    user_id: int,
    queue: str | None,
    kind: str,
    content_length: int | None,
    gate: UploadGate | None = None,
    submit_key: str | None = None,
) -> JobOut:
    """``gate``: the student's upload limits (None for staff, when they are exempt); ``submit_key``:
    the client's key for this submission (its retries send the same)."""
    token = await run_in_threadpool(gate.admit, user_id) if gate is not None else None
    try:
        queue = _request_checked(svc, queue, kind, content_length, submit_key)
        body = gate.renewing(body, user_id, token) if gate is not None else body
        made = await _again(svc, database, body, user_id, submit_key)
        if made is not None:
            return made
        return await _accept(svc, database, body, user_id, queue, kind, content_length, submit_key)
    finally:
        if gate is not None:
            await run_in_threadpool(gate.release, user_id, token)


def _request_checked(svc: Services, queue: str | None, kind: str, content_length: int | None, submit_key: str | None) -> str:
    """What the request says, checked before anything is read: its size, names and key; the queue."""
    limit = svc.settings.max_upload_bytes
    if content_length is not None and content_length > limit:
        raise TooLarge(f"archive is {human_size(content_length)}; the limit is {human_size(limit)}")
    queue = queue or svc.settings.default_queue
    if not QUEUE.match(queue):
        raise Invalid(f"bad queue name {queue!r}")
    if not KIND.match(kind):
        raise Invalid(f"bad submission kind {kind!r}: lower-case letters, digits, - and _")
    if submit_key is not None and not SUBMIT_KEY.match(submit_key):
        raise Invalid("bad Idempotency-Key: 1 to 64 letters, digits, '_', '.', ':' or '-'")
    return queue


async def _again(svc: Services, database: Database, body: AsyncIterator[bytes], user_id: int, submit_key: str | None) -> JobOut | None:
    """A retry of an upload that landed: the job it made, before any check that job would now fail
    (the active-jobs quota). The body is still read to its end (within the upload limit): an answer
    sent before it may be lost when the connection closes under the client's writes."""

    def made() -> JobOut | None:
        with database.session() as db:
            job = made_with(db, user_id, submit_key)
            return job_out(db, job, QueueView(db, svc.settings)) if job is not None else None

    out = await run_in_threadpool(made) if submit_key is not None else None
    if out is not None:
        tmp, _, _ = await svc.storage.receive(body, svc.settings.max_upload_bytes, "the archive")
        tmp.unlink(missing_ok=True)
    return out


async def _accept(
    svc: Services,
    database: Database,
    body: AsyncIterator[bytes],
    user_id: int,
    queue: str,
    kind: str,
    content_length: int | None,
    submit_key: str | None,
) -> JobOut:
    limit = svc.settings.max_upload_bytes

    def _precheck() -> None:  # before reading a byte of the upload: bad Wi-Fi, big projects
        with database.session() as db:
            user = db.get_one(User, user_id)
            Deadlines(db, svc.settings).admit(kind, user, utcnow())  # an unknown kind, or out of its window
            check_queue(db, queue, svc.settings.default_queue)
            check_quotas(db, user, svc.settings)
            check_storage(db, user, svc.settings, content_length or 0)

    await run_in_threadpool(_precheck)
    tmp, sha, size = await svc.storage.receive(body, limit, "the archive")

    def _accept() -> JobOut:
        """Everything that reads the student's bytes runs here, off the event loop."""
        with database.session() as db:
            course = current_course(db, kind) if kind in svc.settings.ranked_kind_set else None
            course_spec = spec_of(course) if course is not None else None
        spec: BuildSpec  # the course's (a CourseSpec) or the student's
        try:
            info = inspect_archive(tmp, ArchiveLimits())
            if course is not None and course_spec is not None:  # a ranked run: the course's build file, not the student's
                spec, spec_text = course_spec, course.spec_yaml
            elif info.spec_bytes is None:
                raise Invalid(f"{SPEC_FILENAME}: not found at the top of the uploaded project")
            else:
                spec, spec_text = parse_spec(info.spec_bytes), info.spec_bytes.decode()
        except ArchiveError as exc:
            raise BadArchive(str(exc)) from None
        except SpecError as exc:
            raise Invalid(str(exc)) from None
        required = {svc.settings.verified_kind: list(svc.settings.final_requires)}
        if course_spec is not None:
            required[kind] = [*required.get(kind, []), *course_spec.ranked.student_files]
        missing = missing_for_kind(kind, info.names, required)
        if missing:
            raise Invalid(f"a '{kind}' submission must include {', '.join(missing)} (not found in the project)")
        check_image(spec.image, queue, svc.settings.images_allowed_on(queue))
        run_archive, run_sha, run_size = tmp, sha, size
        if course_spec is not None:
            run_archive = svc.storage.tempfile(".tar.gz")
        try:
            if course_spec is not None:  # what runs holds only the files the course names
                run_size = student_part(tmp, course_spec.ranked.student_files, run_archive)
                run_sha = sha256_of(run_archive)
            with database.session() as db:
                # First statement of the transaction: a write on the student's row. It takes the
                # row's lock on PostgreSQL and the database's write lock on SQLite, so concurrent
                # uploads of one student are checked against the quota one after the other.
                db.execute(update(User).where(User.id == user_id).values(id=User.id))
                made = made_with(db, user_id, submit_key)  # the same submission's other upload won the lock
                if made is not None:
                    return job_out(db, made, QueueView(db, svc.settings))
                owner = db.get_one(User, user_id)
                check_quotas(db, owner, svc.settings)
                check_ranked_rate(db, owner, svc.settings, kind, course_spec)
                check_storage(db, owner, svc.settings, run_size)
                check_requirements(db, queue, spec, svc.settings.worker_dead_after)
                admission = Deadlines(db, svc.settings).admit(kind, owner, utcnow())  # again: late days, under the lock
                svc.storage.keep_archive(run_archive, run_sha)  # only now: a refused upload leaves nothing behind
                job = create_job(
                    db,
                    svc,
                    owner,
                    spec,
                    spec_text,
                    run_sha,
                    run_size,
                    queue,
                    kind,
                    course=db.merge(course) if course is not None else None,
                    admission=admission,
                    submit_key=submit_key,
                )
                out = job_out(db, job, QueueView(db, svc.settings))
                out.deadline_note = admission.note
                return out
        finally:
            if run_archive is not tmp:
                run_archive.unlink(missing_ok=True)

    try:
        return await run_in_threadpool(_accept)
    finally:
        tmp.unlink(missing_ok=True)
