"""The database tables: users, jobs, workers, the course's build files, regrade requests."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import JSON, BigInteger, Boolean, Enum, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint, false, text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from raiprotocol.models import JobState, Phase
from raiprotocol.spec import BuildSpec, parse_course_spec, parse_spec
from raiserver.store.db import Base, UTCDateTime, utcnow


class User(Base):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    username: Mapped[str] = mapped_column(String(64), unique=True)
    role: Mapped[str] = mapped_column(String(16), default="student")
    firstname: Mapped[str | None] = mapped_column(String(128))
    lastname: Mapped[str | None] = mapped_column(String(128))
    email: Mapped[str | None] = mapped_column(String(256))
    team: Mapped[str | None] = mapped_column(String(128))
    access_key: Mapped[str] = mapped_column(String(64), unique=True)
    secret_hash: Mapped[str] = mapped_column(String(128))
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    sessions_after: Mapped[datetime | None] = mapped_column(UTCDateTime)  # browser sessions begun before are over

    jobs: Mapped[list[Job]] = relationship(back_populates="owner")


class Job(Base):
    __tablename__ = "jobs"
    # one job per submission: a client's retry of an upload that landed carries the same key (issue 51)
    __table_args__ = (
        Index("ix_jobs_owner_submit_key", "owner_id", "submit_key", unique=True),
        # a whole term in one table (issue 52, migration 0017): what pages ask, without reading every job
        Index(
            "ix_jobs_late_days", "owner_id", "kind", "late_days", postgresql_where=text("late_days > 0"), sqlite_where=text("late_days > 0")
        ),
        Index("ix_jobs_queue_started", "queue", "started_at"),
        Index("ix_jobs_owner_released", "owner_id", "released_at"),
        Index("ix_jobs_owner_created", "owner_id", "created_at"),
        Index("ix_jobs_owner_started", "owner_id", "started_at"),
        Index("ix_jobs_finished_at", "finished_at"),
        Index(
            "ix_jobs_remeasure_of",
            "remeasure_of",
            postgresql_where=text("remeasure_of IS NOT NULL"),
            sqlite_where=text("remeasure_of IS NOT NULL"),
        ),
    )

    id: Mapped[str] = mapped_column(String(26), primary_key=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    queue: Mapped[str] = mapped_column(String(64), index=True)
    kind: Mapped[str] = mapped_column(String(32), default="dev")
    # stored as the state's name in a VARCHAR(16), as before (no database enum type to migrate)
    state: Mapped[JobState] = mapped_column(
        Enum(JobState, native_enum=False, length=16, create_constraint=False), index=True, default=JobState.queued
    )
    image: Mapped[str] = mapped_column(String(256))
    spec_yaml: Mapped[str] = mapped_column(Text)
    archive_sha256: Mapped[str] = mapped_column(String(64))
    archive_bytes: Mapped[int] = mapped_column(Integer, default=0)
    gpu_count: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    worker: Mapped[str | None] = mapped_column(String(128))
    attempt: Mapped[int] = mapped_column(Integer, default=1)
    exit_code: Mapped[int | None] = mapped_column(Integer)
    failed_command: Mapped[str | None] = mapped_column(Text)
    message: Mapped[str | None] = mapped_column(Text)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    has_build: Mapped[bool] = mapped_column(Boolean, default=False)
    build_bytes: Mapped[int] = mapped_column(BigInteger, default=0)  # the stored build folder's size
    archive_kept: Mapped[bool] = mapped_column(Boolean, default=True)  # False once retention removed it
    results: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    gpu_name: Mapped[str | None] = mapped_column(String(128))
    released_at: Mapped[datetime | None] = mapped_column(UTCDateTime)  # handed to Celery (fair share)
    lease_at: Mapped[datetime | None] = mapped_column(UTCDateTime)  # the running attempt last renewed its lease over HTTP
    remeasure_of: Mapped[str | None] = mapped_column(String(26))  # staff asked to measure this job again (issue 32)
    repeats: Mapped[int | None] = mapped_column(Integer)  # timed runs, where not the course file's (a re-measure)
    phases: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON)  # [{name, at, detail}]: raiprotocol.models.Phase
    waiting: Mapped[str | None] = mapped_column(Text)  # claimed but waiting in the batch system (Slurm PENDING): why
    # a ranked run: built and timed by the course's build file of this id, not the student's
    course_build_id: Mapped[int | None] = mapped_column(ForeignKey("course_builds.id"), nullable=True)
    late_days: Mapped[int] = mapped_column(Integer, default=0)  # late days this submission drew from its owner's budget
    # a ranked run (the course's build file, a re-measure): released on the hosts' reserved places (fairshare.free_slots)
    reserved: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    submit_key: Mapped[str | None] = mapped_column(String(64))  # the client's Idempotency-Key for this submission, if it sent one
    # the job's facts, resolved once (migration 0018): the wall limit its build file asks for (0: none;
    # NULL: a job from before, whose file is parsed when asked) and when its current run was claimed
    wall_seconds: Mapped[int | None] = mapped_column(Integer)
    claimed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    owner: Mapped[User] = relationship(back_populates="jobs")

    def build_spec(self) -> BuildSpec:
        """The build file the job runs: the course's for a ranked run, else the student's."""
        return parse_course_spec(self.spec_yaml) if self.course_build_id is not None else parse_spec(self.spec_yaml)

    def asked_wall_seconds(self) -> int:
        """The wall limit the job's build file asks for (0: none), as resolved at submission."""
        if self.wall_seconds is not None:
            return self.wall_seconds
        try:  # a job from before migration 0018: its file, parsed (not written back: a read stays a read)
            return self.build_spec().resources.limits.wall_seconds or 0
        except ValueError:  # stored before a rule tightened: the server's limit holds
            return 0

    def wall_limit(self, server_max: int) -> int:
        """The job's wall-time limit: what its build file asks for, never more than the server's."""
        return min(self.asked_wall_seconds() or server_max, server_max)

    def last_claimed(self) -> datetime | None:
        """When the job's current run was claimed (a job from before 0018: its phases say)."""
        if self.claimed_at is not None:
            return self.claimed_at
        times = [p.get("at") for p in self.phases or [] if p.get("name") == "claimed"]
        return datetime.fromisoformat(times[-1]) if times and times[-1] else self.started_at

    def timeline(self) -> list[Phase]:
        """The job's steps as the server and the worker noted them, with the ones its columns
        already hold (submitted, released, finished), in the order they happened."""
        phases = [Phase(name="submitted", at=self.created_at)]
        if self.released_at:
            phases.append(Phase(name="released", at=self.released_at, detail=self.queue))
        phases += [Phase.model_validate(p) for p in self.phases or []]
        if self.finished_at:
            phases.append(Phase(name="finished", at=self.finished_at, detail=self.state.value))
        return sorted(phases, key=lambda p: p.at if p.at.tzinfo else p.at.replace(tzinfo=timezone.utc))


class CourseBuild(Base):
    """The course's build file for a ranked kind (issue 23), one row per installed version: a job
    names the version it ran, so a grade can be traced to the exact commands that produced it.
    The labels stay here: no job container ever sees them."""

    __tablename__ = "course_builds"
    __table_args__ = (UniqueConstraint("kind", "version"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(32), index=True)
    version: Mapped[int] = mapped_column(Integer)
    spec_yaml: Mapped[str] = mapped_column(Text)
    labels: Mapped[str] = mapped_column(Text)  # one expected answer per line
    installed_by: Mapped[str] = mapped_column(String(64))
    installed_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Kind(Base):
    """A submission kind of the course (issue 36): when it opens, when it is due, what happens to a
    submission after that, and how its runs are graded. Seeded from RAI_KINDS and RAI_DEADLINE."""

    __tablename__ = "kinds"

    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    opens_at: Mapped[datetime | None] = mapped_column(UTCDateTime)  # None: open from the start
    due_at: Mapped[datetime | None] = mapped_column(UTCDateTime)  # None: no deadline
    late_policy: Mapped[str] = mapped_column(String(16), default="refuse")  # refuse | mark | days
    late_hours: Mapped[float | None] = mapped_column(Float)  # the late window after each student's deadline; None: no end
    grading: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # raiprotocol.models.GradeRule


class Extension(Base):
    """A later deadline for one student or one team on one kind."""

    __tablename__ = "extensions"
    __table_args__ = (UniqueConstraint("kind", "username", "team"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(ForeignKey("kinds.name", ondelete="CASCADE"), index=True)
    username: Mapped[str | None] = mapped_column(String(64))
    team: Mapped[str | None] = mapped_column(String(128))
    due_at: Mapped[datetime] = mapped_column(UTCDateTime)
    reason: Mapped[str] = mapped_column(String(256), default="")
    granted_by: Mapped[str] = mapped_column(String(64))
    granted_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Worker(Base):
    __tablename__ = "workers"

    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    queues: Mapped[list[str]] = mapped_column(JSON, default=list)
    executor: Mapped[str] = mapped_column(String(32), default="")
    slots: Mapped[int] = mapped_column(Integer, default=1)
    busy: Mapped[int] = mapped_column(Integer, default=0)
    gpus: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    running: Mapped[list[str]] = mapped_column(JSON, default=list)
    version: Mapped[str] = mapped_column(String(32), default="")
    images: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)  # None: runs any image (no containers)
    pulls: Mapped[dict[str, str] | None] = mapped_column(JSON, nullable=True)
    arch: Mapped[str | None] = mapped_column(String(16), nullable=True)  # CPU architecture of its jobs
    first_seen: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_seen: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    jobs_done: Mapped[int] = mapped_column(Integer, default=0)


class AuditEntry(Base):
    """Every state-changing action by staff: who did what to whom, when."""

    __tablename__ = "audit_log"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
    actor: Mapped[str] = mapped_column(String(64))
    action: Mapped[str] = mapped_column(String(64))
    target: Mapped[str] = mapped_column(String(256), default="")
    detail: Mapped[dict[str, Any] | None] = mapped_column(JSON)


class RevokedKey(Base):
    """Access keys that no longer work, so their holders get a clear message instead of 'unknown'."""

    __tablename__ = "revoked_keys"

    access_key: Mapped[str] = mapped_column(String(64), primary_key=True)
    username: Mapped[str] = mapped_column(String(64))
    at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    reason: Mapped[str] = mapped_column(String(32), default="revoked")


class RegradeRequest(Base):
    """A student asks staff to look at one run again (issue 36); staff re-measure it, adjust its
    grade with a reason, or answer. One open request per run per student (the partial index)."""

    __tablename__ = "regrade_requests"
    __table_args__ = (
        Index(
            "one_open_regrade",
            "job_id",
            "student_id",
            unique=True,
            postgresql_where=text("state = 'open'"),
            sqlite_where=text("state = 'open'"),
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id"), index=True)
    student_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    message: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    state: Mapped[str] = mapped_column(String(8), default="open", index=True)  # open | closed
    outcome: Mapped[str | None] = mapped_column(String(16))  # remeasured | adjusted | answered
    answer: Mapped[str | None] = mapped_column(Text)
    grade: Mapped[str | None] = mapped_column(String(32))
    reason: Mapped[str | None] = mapped_column(Text)
    remeasure_job: Mapped[str | None] = mapped_column(String(26))
    closed_by: Mapped[str | None] = mapped_column(String(64))
    closed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    job: Mapped[Job] = relationship()
    student: Mapped[User] = relationship()


class SimilarityReport(Base):
    """A pairwise similarity report over each team's latest submission of a kind (issue 36): staff
    start it, the server's background loop makes it (grading/similarity.py) and notes its progress
    here; the most similar pairs are kept with the regions that match, for the side-by-side page."""

    __tablename__ = "similarity_reports"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(32))
    state: Mapped[str] = mapped_column(String(8), default="queued", index=True)  # queued | running | done | failed
    started_by: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    phase: Mapped[str | None] = mapped_column(String(16))  # reading | comparing
    done: Mapped[int] = mapped_column(Integer, default=0)
    total: Mapped[int] = mapped_column(Integer, default=0)
    teams: Mapped[int] = mapped_column(Integer, default=0)
    message: Mapped[str | None] = mapped_column(Text)
    starter: Mapped[str] = mapped_column(Text, default="")  # the course's starter code: boilerplate, never a match
    files: Mapped[list[str] | None] = mapped_column(JSON)  # the student files compared
    pairs: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON)  # the most similar pairs, most similar first
    code: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # job id -> {team, code} of the teams in those pairs
