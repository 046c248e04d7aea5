"""The leaderboard: each team's (or lone student's) best valid run, fastest first.

Ranked board (issue 23): runs the service built with the course's build file, timed itself (the
median of its timed runs) and checked against answers only the server holds, that reach the
course's correctness threshold; what the program printed never ranks. Unverified board: every
other run whose own output printed op times and a good enough correctness, shown apart. Best: smallest op time,
ties to the earlier run (or, with the "last" policy, each team's latest valid run). Students see
other teams under stable pseudonyms and their own under its real name; staff see everyone's
names; with ``leaderboard_hidden_until_deadline`` students see only their own row until then.
A run submitted after its owner's own deadline (issue 36: extensions move it, late days pay for it) does not rank.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import weakref
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import Text, cast, select
from sqlalchemy.orm import Session, joinedload, load_only

from raiprotocol.models import Entry, JobResultSummary, JobState, Measured
from raiserver.access.permissions import Principal, run_by_staff, sees_names_on_board
from raiserver.config import Settings
from raiserver.grading.keeping import one_maker
from raiserver.grading.kinds import Deadlines, Person, Personal, Submission, when
from raiserver.grading.measured import QUARANTINE, in_words
from raiserver.store.db import SETTLE, utcnow
from raiserver.store.summaries import path, summary_of
from raiserver.store.tables import Job, Kind, User

BOARDS = ("ranked", "unverified")  # the runs the service built, timed and checked; the others, shown apart


def _aware(t: datetime) -> datetime:
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def user_key(user: Person) -> str:
    """The board's entry a student's runs go to: their team's, or their own."""
    return f"team:{user.team}" if user.team else f"user:{user.username}"


def team_key(job: Submission) -> str:
    return user_key(job.owner)


def pseudonym(key: str, secret: str) -> str:
    digest = hmac.new(secret.encode(), key.encode(), hashlib.sha256).hexdigest()
    return f"team-{digest[:6]}"


@dataclass(frozen=True)
class Run:
    """A job that makes a board: its results (read whole once: the board keeps it) and end, which
    ``job`` only holds as optional columns."""

    job: Job
    summary: JobResultSummary
    finished: datetime

    @property
    def measured(self) -> Measured | None:
        return self.summary.measured

    @property
    def op_time(self) -> float:
        m = self.measured
        return _made(m.op_time if m else self.summary.op_time_total)

    @property
    def correctness(self) -> float:
        m = self.measured
        return _made(m.accuracy) if m else min(self.summary.correctness.values())


def _made(figure: float | None) -> float:
    """A figure of a run that made the board: present, or ``candidates`` had left the run out."""
    if figure is None:
        raise TypeError("a run on the board has no figure")
    return float(figure)


@dataclass(frozen=True)
class Candidate:
    """A succeeded run as a board first reads it (issue 52): whose, what kind, when, and the two
    figures it is ranked by; only each team's best is read whole (``Run``). Reading every run whole
    (its results decoded, an ORM object made) took 10 s for the unverified board at 250,000 jobs."""

    id: str
    owner: User
    kind: str
    created_at: datetime
    finished_at: datetime
    op_time: float | None  # None: nothing that ranks (no figure, or the service's measurement has a problem)
    correctness: float | None
    remeasure_of: str | None

    @property
    def owner_id(self) -> int:
        return self.owner.id


# the figures the database reads out of each run's stored JobResultSummary (checked against the model)
MEASURED_OP_TIME, MEASURED_ACCURACY, MEASURED_PROBLEM = (path("measured", name) for name in ("op_time", "accuracy", "problem"))
PRINTED_OP_TIME, PRINTED_CORRECTNESS = path("op_time_total"), path("correctness")


def _figures(board: str, row: Any) -> tuple[float | None, float | None]:
    """(op time, correctness) a board ranks a run by: the service's measurement on the ranked board
    (nothing if it names a problem), what the program printed on the unverified one."""
    if board == "ranked":
        if row.problem is not None or row.op_time is None or row.accuracy is None:
            return None, None
        return float(row.op_time), float(row.accuracy)
    if row.op_time is None or not row.correctness:
        return None, None
    return float(row.op_time), float(min(row.correctness.values()))


def candidates(
    db: Session,
    board: str,
    kind: str | None,
    users: dict[int, User],
    after: datetime | None = None,
    owners: Collection[int] | None = None,
    until: datetime | None = None,
) -> list[Candidate]:
    """The runs that may make the board: succeeded, and only the service's own measurements for the
    ranked board (measured results exist only for runs the course's build file built), only the
    others for the unverified one; those that ended after ``after`` and by ``until``, of ``owners``."""
    # the figures read out by the database, as numbers where it can (no run's whole results decoded here)
    figures = (
        (
            Job.results[MEASURED_OP_TIME].as_float().label("op_time"),
            Job.results[MEASURED_ACCURACY].as_float().label("accuracy"),
            Job.results[MEASURED_PROBLEM].as_string().label("problem"),
        )
        if board == "ranked"
        else (Job.results[PRINTED_OP_TIME].as_float().label("op_time"), Job.results[PRINTED_CORRECTNESS].label("correctness"))
    )
    query = select(Job.id, Job.owner_id, Job.kind, Job.created_at, Job.finished_at, Job.remeasure_of, *figures).where(
        Job.state == JobState.succeeded,
        Job.finished_at.is_not(None),
        Job.course_build_id.is_not(None) if board == "ranked" else Job.course_build_id.is_(None),
    )
    if kind is not None:
        query = query.where(Job.kind == kind)
    if after is not None:
        query = query.where(Job.finished_at > after)
    if until is not None:
        query = query.where(Job.finished_at <= until)
    if owners is not None:
        query = query.where(Job.owner_id.in_(owners))
    out = []
    for row in db.execute(query):
        op_time, correctness = _figures(board, row)
        owner = users.get(row.owner_id)
        if owner is not None:
            out.append(Candidate(row.id, owner, row.kind, row.created_at, row.finished_at, op_time, correctness, row.remeasure_of))
    return out


def board_run(c: Candidate, settings: Settings, deadlines: Deadlines, remeasured: frozenset[str] = frozenset()) -> float | None:
    """The run's op time on its board, or None if it does not make it."""
    if c.op_time is None or c.correctness is None or c.correctness < settings.correctness_threshold:
        return None
    if not deadlines.counts(c):
        return None  # submitted after its owner's own deadline: kept, not ranked
    if c.id in remeasured:  # staff measured it again: that run's result stands instead (issue 32)
        return None
    return c.op_time


@dataclass
class Board:
    """Each team's best run on one board, and the members who made a run of it; what the runs that
    ended by ``until`` give, as they were judged under ``inputs``."""

    inputs: tuple[Any, ...]
    until: datetime | None = None
    best: dict[str, Candidate] = field(default_factory=dict)
    members: dict[str, set[str]] = field(default_factory=dict)
    remeasured: frozenset[str] = frozenset()  # runs measured again: their re-measure stands instead
    whole: dict[str, Run] = field(default_factory=dict)  # best runs read whole, by job id: shared by the copies
    personal: Personal | None = None  # late days drawn and extensions, as the runs were judged under them

    def copy(self) -> Board:
        members = {k: set(v) for k, v in self.members.items()}
        return Board(self.inputs, self.until, dict(self.best), members, self.remeasured, self.whole, self.personal)

    def rejudge(self, db: Session, board: str, kind: str | None, users: dict[int, User], settings: Settings, deadlines: Deadlines) -> None:
        """Late days drawn or an extension changed for some students: their teams' entries made again
        from their runs (a late submission's late days make an earlier late run count), the rest kept."""
        personal, before = deadlines.personal(), self.personal
        self.personal = personal
        if before is None or self.until is None:
            return
        owners = before.changed(personal, users.values())
        keys = {user_key(users[o]) for o in owners if o in users}
        for key in keys:
            self.best.pop(key, None)
            self.members.pop(key, None)
        members = [u.id for u in users.values() if user_key(u) in keys]
        if members:
            self.fold(candidates(db, board, kind, users, owners=members, until=self.until), settings, deadlines)

    def fold(self, runs: Sequence[Candidate], settings: Settings, deadlines: Deadlines) -> None:
        last = settings.leaderboard_policy == "last"
        for c in runs:
            op_time = board_run(c, settings, deadlines, self.remeasured)
            if op_time is None:
                continue
            key = team_key(c)
            self.members.setdefault(key, set()).add(c.owner.username)
            cur = self.best.get(key)
            if cur is None or (
                c.finished_at > cur.finished_at if last else (op_time, c.finished_at) < (cur.op_time or 0.0, cur.finished_at)
            ):
                self.best[key] = c


# Each board as last computed, per process (issue 52): reading every run of the term for each view
# of the board took seconds at 250,000 jobs. A run that ends is folded in; anything that changes how
# an earlier run counts (a deadline, an extension, late days drawn, a team, a re-measure, a setting)
# makes it again from every run.
_BOARDS: weakref.WeakKeyDictionary[Any, dict[tuple[str, str | None], Board]] = weakref.WeakKeyDictionary()  # per engine
_BOARDS_LOCK = threading.Lock()


def _inputs(settings: Settings, deadlines: Deadlines, users: dict[int, User]) -> tuple[Any, ...]:
    """What decides, for everyone, whether a run that ended long ago counts, and for which team
    (what applies to some students only is ``Deadlines.personal``: ``Board.rejudge``)."""
    return (
        deadlines.fingerprint(),
        hash(tuple((u.id, u.username, u.team, u.role, u.active) for u in users.values())),
        settings.leaderboard_policy,
        settings.correctness_threshold,
        tuple(sorted(settings.ranked_kind_set)),
    )


def best_runs(
    db: Session, settings: Settings, board: str = "ranked", kind: str | None = None, cached: bool = True, settled_only: bool = False
) -> list[tuple[str, Run, set[str]]]:
    """Each team's run on the board, best first (``kind``: of that kind only). ``cached``: from
    this process's last look, with the runs that ended since (False: from every run, as the
    caller's session sees them, uncommitted changes included). ``settled_only``: the kept board
    brought up to date and nothing more (the background pass: the runs of the last minutes, which
    a look folds in for itself, are not read)."""
    if not cached:
        deadlines = Deadlines(db, settings)
        runs = candidates(db, board, kind, {u.id: u for u in db.scalars(select(User).order_by(User.id))})
        result = Board((), remeasured=frozenset(c.remeasure_of for c in runs if c.remeasure_of))
        result.fold(runs, settings, deadlines)
    else:
        # what decides the board read in its turn: a look that waited reads what the one before it
        # kept the board under, not what held when it started waiting
        with one_maker(db.get_bind(), ("board", board, kind)):
            deadlines = Deadlines(db, settings)
            users = {u.id: u for u in db.scalars(select(User).order_by(User.id))}
            result = _cached_board(db, settings, deadlines, users, board, kind, settled_only)
    ranked = sorted(result.best.items(), key=lambda kv: (kv[1].op_time or 0.0, kv[1].finished_at))
    missing = [c.id for _, c in ranked if c.id not in result.whole]  # a team's best that is new since the last look
    for job in db.scalars(select(Job).options(joinedload(Job.owner)).where(Job.id.in_(missing))) if missing else ():
        result.whole[job.id] = Run(job, summary_of(job) or JobResultSummary(), job.finished_at or utcnow())
    return [(key, result.whole[c.id], result.members[key]) for key, c in ranked if c.id in result.whole]


def _cached_board(
    db: Session, settings: Settings, deadlines: Deadlines, users: dict[int, User], board: str, kind: str | None, settled_only: bool = False
) -> Board:
    """The board as this process keeps it, brought up to date (called in the board's turn)."""
    inputs = _inputs(settings, deadlines, users)
    settled = utcnow() - SETTLE
    with _BOARDS_LOCK:
        boards = _BOARDS.setdefault(db.get_bind(), {})
        kept = boards.get((board, kind))
        kept = kept.copy() if kept is not None and kept.inputs == inputs else None
    if kept is not None and kept.personal != deadlines.personal():
        if kept.personal is None:
            kept = None  # not known what it was judged under: made again
        else:
            kept.rejudge(db, board, kind, users, settings, deadlines)
    last = settled if settled_only else None
    runs = candidates(db, board, kind, users, kept.until if kept is not None else None, until=last)
    if kept is not None and not {c.remeasure_of for c in runs if c.remeasure_of} <= kept.remeasured:
        kept, runs = None, candidates(db, board, kind, users, until=last)  # a re-measure took a run off: all again
    if kept is None:
        kept = Board(inputs, remeasured=frozenset(c.remeasure_of for c in runs if c.remeasure_of), personal=deadlines.personal())
    ended = [c for c in runs if c.finished_at <= settled]
    kept.fold(ended, settings, deadlines)
    kept.until = settled
    with _BOARDS_LOCK:
        boards[(board, kind)] = kept.copy()
    kept.fold([c for c in runs if c.finished_at > settled], settings, deadlines)  # this look only
    return kept


def hidden(db: Session, settings: Settings, viewer: Principal) -> bool:
    """Whether this viewer sees only their own row (hidden board, before the verified kind's deadline)."""
    if not settings.leaderboard_hidden_until_deadline or sees_names_on_board(viewer):
        return False
    row = db.get(Kind, settings.verified_kind)
    return row is None or row.due_at is None or datetime.now(timezone.utc) < _aware(row.due_at)


def leaderboard(db: Session, settings: Settings, viewer: Principal, limit: int | None = None, board: str = "ranked") -> list[Entry]:
    mine_key = f"team:{viewer.user.team}" if viewer.user.team else f"user:{viewer.user.username}"
    only_mine = hidden(db, settings, viewer)
    whole = sees_names_on_board(viewer)
    out = []
    for i, (key, run, names) in enumerate(best_runs(db, settings, board)[:limit], start=1):
        job, results, m = run.job, run.summary, run.measured
        mine = key == mine_key
        if only_mine and not mine:
            continue
        real = key.split(":", 1)[1]
        out.append(
            Entry(
                rank=i,
                name=real if (whole or mine) else pseudonym(key, settings.pseudonym_secret),
                op_time=run.op_time,
                # a course file from before issue 46 ranked the kernels; since then they are the profiled run's feedback
                op_times=[k.ms / 1e3 for k in m.kernels] if m and m.measure == "kernels" else results.op_times,
                spread=m.spread if m else results.op_time_spread,
                runs=len(m.runs) // max(1, m.passes) if m else (len(results.op_time_runs) or 1),
                correctness=run.correctness,
                when=run.finished,
                gpu=job.gpu_name,
                kind=job.kind,
                verified=m is not None,
                flags=m.flags if m is not None and whole else [],
                ci=m.ci if m else None,
                mine=mine,
                job_id=job.id if (whole or mine) else None,
                members=sorted(names) if whole else None,
                shared_gpu=m is None and bool(results.gpu_shared_with),
                staff=run_by_staff(job.owner) and not job.owner.team,
            )
        )
    for above, below in zip(out, out[1:], strict=False):  # intervals that overlap: a tie, not a lead (issue 32)
        if above.ci is not None and below.ci is not None and below.op_time - above.op_time <= above.ci + below.ci:
            below.tie = above.tie = True
    return out


def verdict(db: Session, settings: Settings, job: Job) -> str | None:
    """What the student of a ranked run (one the course's build file built and timed) is told at
    its end, in the client and on its page: its rank, or why it does not rank (issue 32). The job's
    state and results are set in ``db``'s session (not yet committed): the board includes it."""
    summary = summary_of(job)
    m = summary.measured if summary else None
    if job.course_build_id is None or m is None:
        return None
    if m.problem:
        return f"Not ranked: {m.problem}"
    if job.state is not JobState.succeeded:
        return f"Not ranked: the job {job.state.value.replace('_', ' ')}"
    deadlines = Deadlines(db, settings)
    if not deadlines.counts(job):
        due = deadlines.due_for(job.kind, job.owner)
        return f"Not ranked: submitted after the deadline ({when(due) if due else 'none'})"
    accuracy = m.accuracy
    if accuracy is None or accuracy < settings.correctness_threshold:
        return f"Not ranked: accuracy {accuracy if accuracy is not None else 0:.4g} is below {settings.correctness_threshold:g}"
    runs = best_runs(db, settings, cached=False)  # this job's end is not committed yet
    key = team_key(job)
    for i, (k, run, _) in enumerate(runs, start=1):
        if k != key:
            continue
        ci = f" ± {in_words(m.ci)}" if m.ci else ""
        op_time = in_words(_made(m.op_time))
        if run.job.id == job.id:
            return f"Ranked #{i} of {len(runs)}: {op_time}{ci}"
        return f"This run: {op_time}{ci}; your best run ({in_words(run.op_time)}) stays ranked #{i} of {len(runs)}"
    return "Not ranked"


QUARANTINE_SCAN = 5000  # the newest ranked runs looked at: a term's finals, and far more


def quarantined(db: Session, settings: Settings, limit: int = 200) -> list[dict[str, Any]]:
    """Ranked runs whose total was below the physics floor (issue 46): not ranked, and listed here
    for staff, newest first: no honest kernel gets there, so each is a measurement someone got around."""
    newest = (
        select(Job.id)
        .where(Job.kind.in_(settings.ranked_kind_set), Job.finished_at.is_not(None))
        .order_by(Job.finished_at.desc())
        .limit(QUARANTINE_SCAN)
        .subquery()
    )
    # only the runs whose results name the flag come back to be read (issue 52: all 5,000 results were
    # decoded here, 450 ms at the end of a term); the flags are checked below all the same
    jobs = db.scalars(
        select(Job)
        .options(load_only(Job.id, Job.owner_id, Job.kind, Job.finished_at, Job.results), joinedload(Job.owner))
        .join(newest, Job.id == newest.c.id)
        .where(cast(Job.results, Text).contains(json.dumps(QUARANTINE)))
        .order_by(Job.finished_at.desc())
    ).all()
    out = []
    for job in jobs:
        summary = summary_of(job)
        m = summary.measured if summary else None
        if m is not None and QUARANTINE in m.flags:
            out.append({"job_id": job.id, "owner": job.owner.username, "kind": job.kind, "finished_at": job.finished_at, "why": m.problem})
            if len(out) >= limit:
                break
    return out
