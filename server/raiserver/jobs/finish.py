"""A job's end (the FINISH rule of ``jobs/transitions.py``) as its steps, in the order they must run:
the end recorded, the fence closed (no line of any run lands after it), the log stored, the results
read from it, a ranked run scored and its verdict said, the build folder and the worker's count
noted, all committed, and only then live readers told. Each step is one function of the ``Ending``;
``STEPS`` is the order, and the one place to add a step."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from raiprotocol.models import JobResultSummary, JobState, MeasuredRun
from raiserver.grading.course import spec_of
from raiserver.grading.leaderboard import verdict
from raiserver.grading.measured import summarize
from raiserver.grading.results import RelevantLines, parse_log
from raiserver.jobs.transitions import FINISH, fence, move
from raiserver.parts import Services
from raiserver.store.db import utcnow
from raiserver.store.tables import CourseBuild, Job, Worker


@dataclass
class Outcome:
    """How a job ended, as its run (or the server, for a job that ended without one) reported it.
    ``measured``: a ranked run's timed runs; ``run_attempt``: the attempt whose run ended (its
    worker's copy of the log, if it sent one, makes the stored log whole)."""

    state: JobState
    exit_code: int | None = None
    failed_command: str | None = None
    message: str | None = None
    measured: list[MeasuredRun] | None = None
    run_attempt: int | None = None
    gpu_shared_with: int | None = None


@dataclass
class Ending:
    db: Session
    svc: Services
    job: Job
    outcome: Outcome
    announce: bool
    relevant: RelevantLines = field(default_factory=RelevantLines)
    summary: JobResultSummary = field(default_factory=JobResultSummary)


def record_end(e: Ending) -> None:
    o, job = e.outcome, e.job
    if e.announce and o.message and o.state is not JobState.succeeded:
        e.svc.logs.system(job.id, o.message)
    move(job, FINISH, o.state)
    job.waiting = None
    job.finished_at = utcnow()
    job.exit_code, job.failed_command, job.message = o.exit_code, o.failed_command, o.message


def close_fence(e: Ending) -> None:
    fence(e.svc, e.job)  # no line of any run lands after this: what is archived is the whole log


def store_log(e: Ending) -> None:
    job, svc = e.job, e.svc
    copy = svc.storage.worker_copy_path(job.id, e.outcome.run_attempt or job.attempt)
    svc.logs.archive(job.id, copy if copy.exists() else None, each=lambda b: e.relevant.feed(b.s, b.x))
    copy.unlink(missing_ok=True)
    svc.cancels.clear(job.id)


def read_results(e: Ending) -> None:
    e.summary = parse_log(e.relevant.lines())
    e.summary.gpu_shared_with = e.outcome.gpu_shared_with
    e.job.results = e.summary.model_dump()


def score_ranked(e: Ending) -> None:
    """A ranked run: its timed runs against the course's checks; a run that did not succeed says why."""
    job, summary, state = e.job, e.summary, e.outcome.state
    if job.course_build_id is None:
        return
    course = e.db.get_one(CourseBuild, job.course_build_id)
    spec = spec_of(course)
    planned = job.repeats or spec.ranked.repeats
    kernels = summary.kernels if spec.ranked.profile else None  # the course's profiled run's
    summary.measured = summarize(e.outcome.measured, spec, course.version, summary.op_time_total, job.gpu_name, planned, kernels)
    if state is not JobState.succeeded and summary.measured.problem is None:
        summary.measured.problem = f"the job {state.value.replace('_', ' ')}"
    job.results = summary.model_dump()


def say_verdict(e: Ending) -> None:
    """The student learns a ranked run's outcome: one line, and the page's banner."""
    measured = e.summary.measured
    if measured is None:
        return
    measured.verdict = verdict(e.db, e.svc.settings, e.job)
    e.job.results = e.summary.model_dump()
    if measured.verdict:
        e.svc.logs.system_after_archive(e.job.id, measured.verdict)


def note_build(e: Ending) -> None:
    e.job.has_build = e.svc.storage.build_path(e.job.id).exists()


def count_worker(e: Ending) -> None:
    if e.job.worker:
        w = e.db.get(Worker, e.job.worker)
        if w is not None:
            w.jobs_done += 1


def commit(e: Ending) -> None:
    e.db.commit()


def tell_readers(e: Ending) -> None:
    e.svc.logs.end(e.job.id, e.outcome.state.value)
    e.svc.kick()  # a slot is free


STEPS: tuple[Callable[[Ending], None], ...] = (
    record_end,
    close_fence,
    store_log,
    read_results,
    score_ranked,
    say_verdict,
    note_build,
    count_worker,
    commit,
    tell_readers,
)


def finish_job(db: Session, svc: Services, job: Job, outcome: Outcome, announce: bool = True) -> None:
    """End the job (nothing if it already ended): ``STEPS`` in order. ``announce``: say the
    outcome's message in the log (a run's own report has said it already)."""
    if job.state.finished:
        return
    ending = Ending(db, svc, job, outcome, announce)
    for step in STEPS:
        step(ending)
