"""Wire models shared by client, server and worker: the API speaks these and nothing else."""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from .graderules import RULES
from .sampling import median_of
from .states import ExitCode as ExitCode  # re-exported: one import for the wire's vocabulary
from .states import JobState as JobState


class LogStream(str, Enum):
    out = "out"
    err = "err"
    sys = "sys"  # rai's own lines: "Running: …", "Worker … started the container"


class LogLine(BaseModel):
    n: int  # position in the job's log, from 1; the SSE event id
    t: float  # unix time the worker read the line
    s: LogStream
    text: str


class KernelTime(BaseModel):
    name: str
    ms: float


class JobResultSummary(BaseModel):
    kernels: list[KernelTime] = []  # from ncu/nsys output, for the per-kernel chart
    op_times: list[float] = []
    op_time_total: float | None = None  # with repeated timing runs: the median run's total
    op_time_runs: list[float] = []  # each timing run's total, when the run was repeated
    op_time_spread: float | None = None  # max - min over those runs
    correctness: dict[str, float] = {}
    elapsed_seconds: float | None = None
    max_rss_kb: int | None = None
    measured: Measured | None = None  # ranked runs: what the service measured and checked itself
    gpu_shared_with: int | None = None  # the most other jobs on its GPU beside it (0: alone; None: no GPU)


class Measured(BaseModel):
    """A ranked run as the service measured it (issues 23, 46): these numbers rank, printed ones never do."""

    course_version: int
    measure: str  # op (kernels | wall: course files from before issue 46, which rank nothing)
    op_time: float | None = None  # seconds: the median pass's total of its operations' times
    runs: list[float] = []  # each pass's total, in seconds (passes of run 1, then of run 2, …)
    passes: int = 1  # passes of the course's operations in each timed run (Ranked.passes)
    spread: float | None = None  # max - min of runs
    cv: float | None = None  # coefficient of variation of runs
    accuracy: float | None = None  # 1.0 when every output agreed with the course's reference (the board's gate)
    error: float | None = None  # the largest relative difference from the reference (estimated L2), any run
    reference_time: float | None = None  # the reference's median total on the same inputs, seconds
    kernels: list[KernelTime] = []  # the median run's kernels
    printed_op_time: float | None = None  # what the program said, shown beside, never ranked
    flags: list[str] = []  # for staff: disagreements and oddities worth a look
    problem: str | None = None  # why the run cannot rank (no measurement, no predictions, …)
    cpu_seconds: list[float] = []  # each timed run's CPU time (every process of it), seconds
    ci: float | None = None  # half the 95 % confidence interval of the mean of the timed runs' medians, seconds
    gpu: list[dict[str, Any]] = []  # per timed run, NVML before and after: clocks, temperature, power, throttle reasons
    verdict: str | None = None  # what the student is told: "Ranked #2 of 41: …" or "Not ranked: …"
    # True: every operation's inputs were copied in by rai-timed after its clock started ("Q", the
    # course's harness); False: some operation read them from rai-timed's memory ("P", which rai
    # allows: only slower for the job); None: a worker from before the mark was recorded
    inputs_copied_in: bool | None = None

    def samples(self) -> str:
        """What the median is of, in words: "5 timed runs" or "25 passes (5 timed runs of 5)"."""
        return median_of(len(self.runs), self.passes)


class Phase(BaseModel):
    """One step of a job's life and when it happened: where the time went when the queue is slow."""

    name: str  # submitted, released, claimed, container started, command started, first line, …
    at: datetime
    detail: str | None = None  # the command, its exit status, …


class JobOut(BaseModel):
    id: str
    owner: str
    queue: str
    kind: str
    state: JobState
    image: str
    created_at: datetime
    released_at: datetime | None = None  # handed to the workers' queue by the fair-share dispatcher
    started_at: datetime | None = None
    finished_at: datetime | None = None
    worker: str | None = None
    exit_code: int | None = None
    failed_command: str | None = None
    message: str | None = None
    position: int | None = Field(default=None, description="place in the queue while queued, 1 = next")
    eta_seconds: float | None = Field(
        default=None, description="expected wait before it starts, while queued (for a guess: the upper end, eta_high)"
    )
    eta_low: float | None = Field(default=None, description="while queued: the wait's range, from (seconds, rounded down to 5)")
    eta_high: float | None = Field(default=None, description="while queued: the wait's range, to (seconds, rounded up to 5)")
    eta_guess: str | None = Field(
        default=None,
        description="while queued: why the range is a guess bounded by the jobs' wall limits "
        "(no recent runs to go by, or a job ahead outlived them); None: the range rests on recent runs",
    )
    position_why: str | None = Field(
        default=None, description="while queued: why jobs submitted later are ahead of it (fair share, staff, a kind that goes first)"
    )
    waiting: str | None = Field(
        default=None,
        description="why a job handed to a batch system has not started yet "
        "(Slurm's reason, position and estimated start); the state shows queued meanwhile",
    )
    gpu_name: str | None = None
    has_build: bool = False
    archive_bytes: int = 0
    results: JobResultSummary | None = None
    phases: list[Phase] = []  # in the order they happened
    deadline_note: str | None = None  # (on a new submission) "final is due in 2 h 13 min", or how late it is
    late: str | None = None  # "late by 3 h 5 min" after its owner's own deadline ("(late days)": paid for); None: on time

    @property
    def duration(self) -> float | None:
        if self.started_at and self.finished_at:
            return (self.finished_at - self.started_at).total_seconds()
        return None


class VersionOut(BaseModel):
    """``raiclient version --json``: the client's version and, when one was asked, the server's."""

    client: str
    server: str | None = None  # the server asked (--server, RAI_SERVER or the profile's); None: none known
    server_version: str | None = None  # None: no server asked, or it did not answer


class JobList(BaseModel):
    jobs: list[JobOut]


class FilesFreed(BaseModel):
    """What deleting a job's files freed, and what its owner stores now (quota_bytes 0: no limit)."""

    job_id: str
    freed_bytes: int
    stored_bytes: int
    quota_bytes: int


class QueueSummary(BaseModel):
    """One queue as `raiclient queue` shows it (what `rai queued` showed)."""

    queue: str
    waiting: int
    running: int
    slots: int  # of the live workers serving it
    workers: int
    mine: list[JobOut] = []  # the caller's waiting or running jobs, with positions
    # running on a worker that stopped answering: slots that look busy but run nothing; these jobs
    # go back in the queue once the worker is declared dead
    unanswered: int = 0
    dead_after: float = 0.0


class ImageOffer(BaseModel):
    image: str
    workers: int  # live workers of the queue that hold it


class QueueImages(BaseModel):
    """What one queue can run: `raiclient images`, and the list a refused submission names."""

    queue: str
    workers: int  # live workers serving the queue
    any_image: bool = False  # a worker without containers (process executor) runs any image name
    images: list[ImageOffer] = []
    pulling: dict[str, str] = {}  # image -> "pulling on N worker(s)" or the last failure


class UserOut(BaseModel):
    username: str
    role: str
    firstname: str | None = None
    lastname: str | None = None
    email: str | None = None
    team: str | None = None
    max_upload_bytes: int | None = None  # (on /me) the largest project archive the server takes


# -- worker <-> server --------------------------------------------------------------------------


class GpuInfo(BaseModel):
    index: int
    name: str = "unknown"
    memory_mb: int = 0
    shares: int = 1  # jobs that may share it at once (the worker's RAI_JOBS_PER_GPU)
    jobs: int = 0  # shares held by running jobs now (heartbeats)


class Heartbeat(BaseModel):
    name: str
    queues: list[str]
    executor: str
    slots: int
    busy: int = 0
    gpus: list[GpuInfo] = []
    running: list[str] = []
    version: str = ""
    images: list[str] | None = None  # the images this worker holds; None: it runs any (no containers)
    pulls: dict[str, str] = {}  # image -> "pulling" or "failed: why", for images staff asked for
    arch: str | None = None  # the CPU architecture jobs run on, as build files name it (amd64, arm64, ppc64le)


class PullRequest(BaseModel):
    """An image staff asked every worker to hold: from its registry, or a `docker save` tar on the server."""

    image: str
    blob: str | None = None  # sha256 of the uploaded tar; None: pull from the registry
    requested: float  # when (epoch seconds): a worker tries each request once


class HeartbeatReply(BaseModel):
    pull: list[PullRequest] = []


class Claim(BaseModel):
    worker: str
    attempt: int


class ClaimGranted(BaseModel):
    job_id: str
    attempt: int
    image: str
    commands: list[str]
    gpu_count: int
    exclusive: bool = False  # no other job on the host while it runs (timing runs)
    repeat_timing: int = 1  # run the timing command this many times in all (ranked kinds)
    wall_seconds: int | None = None
    command_seconds: int | None = None
    memory_mb: int | None = None
    archive_sha256: str
    timed: TimedRun | None = None  # a ranked run: after the commands, the service's own timed runs
    # the most the server stores of the build folder (RAI_MAX_BUILD_BYTES): the worker keeps no more
    # than this (or its own RAI_BUILD_MB, if smaller); None from a server that did not say
    max_build_bytes: int | None = None
    queue: str = ""  # the job's queue (how many jobs may share a GPU is the worker's word, per queue)


class TimedRun(BaseModel):
    """The course's timed command and its reference, which the worker runs under rai-timed: the
    operations' times taken by rai-timed's clock, their outputs checked against the reference's
    on the same inputs (issue 46)."""

    command: str
    repeats: int
    measure: str  # op
    reference: str = ""  # the course's command that computes the same operations, on the same inputs
    keep: list[str] | None = None  # what of the build's /build each timed run's fresh container starts with (None: all)
    bound_seconds: float | None = None  # one timed run's bound; None: 20x the reference's run, at most 120 s
    cpu_seconds: float | None = None  # the CPU time a timed run may use (the course's budget): stopped once past it
    forbid: list[str] = []  # file-name globs that read as empty in the build's and the timed runs' containers (C25)
    build_files: list[str] | None = None  # the student files the build's /src holds (None: all of them)
    passes: int = 1  # the course's operations this many times over in each timed and reference run (RAI_OP_PASSES)
    max_bytes: int = 4 * 1024**3  # what rai-timed holds in one timed run: every operation's outputs and the next's inputs
    profile: str = ""  # the course's profiled run after the timed runs (feedback, never ranked); "": none
    predictions: str = ""  # unused since issue 46 (a worker from before reads it)
    seeds: list[int] | None = None  # unused since issue 46


class OpMeasure(BaseModel):
    """One operation of a timed run, as rai-timed took it: its time (begin mark to the freeze after
    its end mark), the CPU the job's cgroup used meanwhile, and checks of its outputs under a key
    the job never saw, which the server compares with the reference's (raiserver.grading.opcheck)."""

    inputs: int = Field(ge=0)  # floats
    outputs: int = Field(ge=0)  # floats
    seconds: float | None = None  # None: the operation never ended
    cpu_seconds: float | None = None
    changed: bool = False  # its outputs changed after its end mark (work went on after the clock stopped)
    nonfinite: int = 0
    norm2: float | None = None  # sum of squares of the outputs (None: not finite)
    sketch: list[float | None] = Field(default=[], max_length=64)  # random-sign sums
    sample_at: list[int] = Field(default=[], max_length=64)  # outputs at random places, and their values
    sample_values: list[float | None] = Field(default=[], max_length=64)
    # its prepare mark: True "Q" (rai-timed copied the inputs, after its clock started, into memory
    # the job had page-locked), False "P" (the job read them from rai-timed's memory); None: unsaid
    copied_in: bool | None = None


class MeasuredRun(BaseModel):
    """One timed run as the worker saw it; read only after every process of the job had ended."""

    exit_code: int
    wall_seconds: float
    report: str | None = None  # unused since issue 46 (the profiler's export, from a worker before it)
    predictions: str | None = None  # unused since issue 46
    problem: str | None = None
    cpu_seconds: float | None = None  # CPU time of every process of the run: its cgroup's cpu.stat
    gpu: dict[str, Any] | None = None  # NVML before and after: clocks, temperature, power, throttle reasons
    ops: list[OpMeasure] = Field(default=[], max_length=256)  # the operations the course's harness timed
    reference: list[OpMeasure] = Field(default=[], max_length=256)  # the reference's, on the same inputs
    reference_seconds: float | None = None  # the reference run's wall time (the bound's base)
    reference_problem: str | None = None  # the reference run failed: the run cannot be checked
    bound_seconds: float | None = None  # the bound this run had
    passes: int = Field(default=1, ge=1)  # its operations are this many passes of the course's (TimedRun.passes)


def gpu_slowdowns(gpu: dict[str, Any] | None) -> list[str]:
    """The slowdowns the GPU reported before or after a timed run (``MeasuredRun.gpu``): the worker
    tells the student, the server flags the run for staff."""
    states = gpu or {}
    return sorted({*(states.get("before") or {}).get("throttle", []), *(states.get("after") or {}).get("throttle", [])})


class JobUpdate(BaseModel):
    """A state change reported by the worker holding the claim."""

    attempt: int
    state: JobState
    exit_code: int | None = None
    failed_command: str | None = None
    message: str | None = None
    phases: list[Phase] = []  # measured on the worker: container started, each command, first line
    waiting: str | None = None  # with state running: still waiting in the batch system, and why; None: started
    measured: list[MeasuredRun] | None = Field(default=None, max_length=20)  # a ranked run's timed runs
    # at the end: the most other jobs that ran on the run's GPU beside it (0: it had the GPU alone;
    # None: no GPU); times it printed are marked as shared
    gpu_shared_with: int | None = Field(default=None, ge=0, le=64)


# -- staff views (leaderboard, workers, roster, audit log, images) --------------------------------
class Entry(BaseModel):
    """One leaderboard row."""

    rank: int
    name: str
    op_time: float
    op_times: list[float]
    spread: float | None = None  # max - min over repeated timing runs
    runs: int = 1
    correctness: float
    when: datetime
    gpu: str | None
    kind: str
    verified: bool
    mine: bool = False
    job_id: str | None = None  # only for staff and for the viewer's own row
    members: list[str] | None = None  # staff only
    flags: list[str] = []  # staff only: what the service's measurement found worth a look
    ci: float | None = None  # half the 95 % confidence interval of the timed runs' mean (ranked board)
    tie: bool = False  # its interval overlaps a neighbour's: the order between them is not a lead
    shared_gpu: bool = False  # the run printed its op time while other jobs shared its GPU (unverified board)
    staff: bool = False  # a TA's, instructor's or admin's run (a reference, not a team's)


class WorkerOut(BaseModel):
    name: str
    queues: list[str]
    executor: str
    slots: int
    busy: int
    gpus: list[dict[str, Any]]
    running: list[str]
    last_seen: str
    alive: bool
    jobs_done: int


class IssuedKeys(BaseModel):
    username: str
    access_key: str
    secret_key: str
    firstname: str | None = None
    lastname: str | None = None
    email: str | None = None
    team: str | None = None


class RosterResult(BaseModel):
    created: list[IssuedKeys] = []
    updated: list[str] = []
    unchanged: list[str] = []
    deactivated: list[str] = []
    reactivated: list[str] = []


class UserRow(BaseModel):
    username: str
    role: str
    team: str | None
    email: str | None
    active: bool


class AuditRow(BaseModel):
    at: datetime
    actor: str
    action: str
    target: str
    detail: dict[str, Any] | None


class PullBody(BaseModel):
    image: str


class CourseBuildIn(BaseModel):
    """An instructor installs the build file of a ranked kind (its reference computes the answers)."""

    build_file: str = Field(max_length=64 * 1024)
    labels: str = Field(default="", max_length=4 * 1024 * 1024)  # unused since issue 46 (a client from before sends them)


class CourseBuildOut(BaseModel):
    kind: str
    version: int
    installed_by: str
    installed_at: datetime
    image: str
    student_files: list[str]
    timed: str
    measure: str
    repeats: int
    passes: int = 1  # of the course's operations in each timed run (ranked.passes)
    reference: str = ""  # the course's command the outputs are checked against, on the same inputs
    rtol: float | None = None
    labels: int = 0  # unused since issue 46


# -- a term: kinds, deadlines, extensions, grades, limits (issue 36) ------------------------------
LatePolicy = Literal["refuse", "mark", "days"]


class GradeRule(BaseModel):
    """How a kind's runs are graded: a rule of ``raiprotocol.graderules.RULES`` and its numbers, a
    field each (``graderules.PARAMS`` says them). pass: full points once accuracy reaches the
    threshold. linear: op time ``slow`` s earns 0, ``fast`` s or faster full points, linear between.
    stddev: ``at_median`` of the points at the class median op time, ``per_sd`` more for each
    standard deviation faster (less slower). Both op-time rules need the threshold's accuracy first;
    ``late_penalty``: the fraction lost per started day late (late policy "mark")."""

    rule: str = Field(max_length=32, json_schema_extra={"enum": list(RULES)})
    points: float = Field(100.0, gt=0, le=1e6)
    threshold: float | None = Field(None, ge=0, le=1)  # None: the server's RAI_CORRECTNESS_THRESHOLD
    slow: float | None = Field(None, gt=0, le=1e6)
    fast: float | None = Field(None, gt=0, le=1e6)
    at_median: float = Field(0.8, ge=0, le=1)
    per_sd: float = Field(0.1, ge=0, le=1)
    late_penalty: float = Field(0.0, ge=0, le=1)

    @field_validator("rule")
    @classmethod
    def _known(cls, name: str) -> str:
        if name not in RULES:
            raise ValueError(f"no grade rule {name!r}; one of: {', '.join(RULES)}")
        return name


class KindIn(BaseModel):
    """A change to a kind: only the fields given change. Dates are ISO 8601 (no offset: UTC);
    "none" clears one."""

    opens: str | None = Field(None, max_length=64)
    due: str | None = Field(None, max_length=64)
    late_policy: LatePolicy | None = None
    late_hours: float | None = Field(None, ge=0, le=24 * 365)  # 0: no late window's end
    grading: GradeRule | None = None


class KindOut(BaseModel):
    name: str
    opens_at: datetime | None = None
    due_at: datetime | None = None  # the course's deadline
    late_policy: LatePolicy = "refuse"
    late_hours: float | None = None
    grading: GradeRule | None = None
    extensions: int = 0  # (staff) how many students or teams have a later deadline
    your_due_at: datetime | None = None  # the caller's own deadline (an extension moves it)
    status: str = ""  # for the caller: "open", "opens in 2 d 3 h", "due in 2 h 13 min", "closed", …


class ExtensionIn(BaseModel):
    """A later deadline for one student or one team: ``until`` (ISO 8601) or ``hours`` after the kind's."""

    username: str | None = Field(None, max_length=64)
    team: str | None = Field(None, max_length=128)
    until: str | None = Field(None, max_length=64)
    hours: float | None = Field(None, gt=0, le=24 * 365)
    reason: str = Field("", max_length=256)


class ExtensionOut(BaseModel):
    kind: str
    username: str | None
    team: str | None
    due_at: datetime
    reason: str
    granted_by: str
    granted_at: datetime


class Limits(BaseModel):
    """What the caller may still do now; a limit of 0 means none."""

    exempt: bool = False  # staff, when RAI_STAFF_EXEMPT: no limit applies
    jobs_active: int = 0
    max_active_jobs: int = 0
    submissions_last_minute: int = 0
    submissions_per_minute: int = 0
    submissions_last_day: int = 0
    submissions_per_day: int = 0
    gpu_minutes_used: float = 0.0
    gpu_minutes_per_day: float = 0.0
    late_days_used: int = 0
    late_days: int = 0


class KindsView(BaseModel):
    kinds: list[KindOut]
    limits: Limits


REGRADE_MESSAGE_CHARS = 2000  # a student's message, a staff answer or reason: a paragraph, not an essay
REGRADE_GRADE_CHARS = 32  # an adjusted grade: "92", "A-", "full marks"


class RegradeIn(BaseModel):
    """A student asks for a regrade of one run (issue 36). The length is checked by the server,
    with a sentence; the field's own cap only stops a body no form would send."""

    message: str = Field("", max_length=64 * 1024)


class RegradeAction(BaseModel):
    """Staff answer an open request: ``remeasure`` the run (ranked runs), ``adjust`` the grade with
    a reason, or ``close`` it with an answer. Each closes the request; the answer is what the student reads."""

    action: str = Field(max_length=16)
    answer: str = Field("", max_length=64 * 1024)
    grade: str = Field("", max_length=1024)
    reason: str = Field("", max_length=64 * 1024)
    repeats: int = Field(10, ge=2, le=20)


class RegradeOut(BaseModel):
    id: int
    job_id: str
    kind: str
    student: str
    message: str
    created_at: datetime
    state: str  # open | closed
    outcome: str | None = None  # remeasured | adjusted | answered
    answer: str | None = None
    grade: str | None = None
    reason: str | None = None
    remeasure_job: str | None = None
    closed_by: str | None = None
    closed_at: datetime | None = None


class SimilarityIn(BaseModel):
    """Staff start a similarity report over each team's latest submission of ``kind``; ``starter``:
    the course's starter code, left out as boilerplate."""

    kind: str = Field(max_length=32)
    starter: str = Field("", max_length=256 * 1024)


class SimilarityPair(BaseModel):
    a: str  # team
    b: str
    a_job: str
    b_job: str
    score: float  # the larger share
    share_a: float  # the part of a's code found in b's
    share_b: float
    tokens: int
    a_members: list[str] = []  # the team's students (a student with no team: themself)
    b_members: list[str] = []


class SimilarityOut(BaseModel):
    id: int
    kind: str
    state: str  # queued | running | done | failed
    started_by: str
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    phase: str | None = None  # reading | comparing
    done: int = 0
    total: int = 0
    teams: int = 0
    message: str | None = None
    files: list[str] = []
    pairs: list[SimilarityPair] = []
