"""What a job and the queues look like to the people reading them, computed here once: a
waiting job's position (the fair-share order, so it is what will happen) and its ETA, a job as the
API shows it, the web queue's rows and ``raiclient queue``'s summaries. Nothing here changes a job
(``lifecycle`` does)."""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session, joinedload

from raiprotocol.models import JobOut, JobState, QueueSummary
from raiprotocol.states import UNFINISHED
from raiprotocol.waits import wait_words
from raiserver.access.permissions import Principal, can_see_all_jobs
from raiserver.config import Settings
from raiserver.fleet.workers import live_workers
from raiserver.grading.kinds import Deadlines, in_words
from raiserver.jobs.eta import DEFAULT_GAP, Newcomers, Slotted, Wait, estimate, guesses, known, start_now
from raiserver.jobs.fairshare import fair_order, jumps_line, runs_on
from raiserver.store.db import utcnow
from raiserver.store.summaries import summary_of
from raiserver.store.tables import Job, User

RECENT_RUNS = 30  # latest runs of a kind (by start) that its estimates go by
SCHEDULE_SECONDS = 1.0


@dataclass
class Schedule:
    """A queue's schedule (``eta.estimate``, ~0.1 s of CPU with 100 jobs running), made at most once
    a ``SCHEDULE_SECONDS`` per queue and process, and every request meanwhile answered from it: a
    class polling its queued jobs at a deadline, a submission's answer, each stream's first look.
    Made per request (issue 52, bench/fleet_sim.py), it cost an overloaded server more with every
    submission, and it fell further behind. A job the schedule has not seen (submitted, or moved up,
    since) gets the wait of the place it holds in the line; one past the line's end, the last place's
    wait and a step per place beyond (the line's own spacing). Whether a wait is a guess is decided
    for the line as it is now (``eta.guesses``, from the kinds the schedule knew): a job that moved
    up behind a running job of a kind with no history is told its wait is a guess, as a schedule
    made for it would say. A kind the schedule did not know, or a line that no longer has a slot
    for every job (or now has), makes a new one. One request makes a new schedule while the others
    wait for it (``_making``) and take it, never one each: with a schedule per request that a
    growing line kept out of date, requests queued behind one another and /healthz waited 20 s."""

    at: float  # time.monotonic() when made
    slots: int
    room: bool  # every waiting job had an idle slot (eta.start_now): no play was made
    etas: dict[str, Wait]
    places: list[Wait]  # the waits in the line's order: the first place's, the second's, ...
    whys: dict[str, str | None]  # per kind it knew, why its runs are a guess (None: described)

    def fresh(self, slots: int, room: bool, kinds: set[str], since: float | None = None) -> bool:
        """Made within its second (or, ``since``, after that moment) for as many slots, the same
        room, every kind in line known, with a place to go by."""
        made_lately = time.monotonic() - self.at < SCHEDULE_SECONDS or (since is not None and self.at >= since)
        return made_lately and slots == self.slots and room == self.room and kinds <= self.whys.keys() and bool(self.places)

    def answer(self, running: list[str], waiting: list[Slotted]) -> dict[str, Wait]:
        """Every waiting job's wait (``running``: the kinds on the slots now)."""
        guess = guesses(running, waiting, self.whys)
        out = {}
        for i, w in enumerate(waiting):
            wait = self.etas.get(w.id) or self.place(i)
            if wait.guess != guess[w.id]:  # a guess says its upper end, never its typical start
                wait = replace(wait, mid=wait.high if guess[w.id] else wait.mid, guess=guess[w.id])
            out[w.id] = wait
        return out

    def place(self, i: int) -> Wait:
        """The wait of place ``i`` (0: the first); past the line's end, the last place's, a step a place on."""
        if i < len(self.places):
            return self.places[i]
        first, last, n = self.places[0], self.places[-1], len(self.places)
        beyond = i - n + 1

        def on(at_last: float, at_first: float) -> float:
            step = (at_last - at_first) / (n - 1) if n > 1 else at_last  # one place's share of the line
            return at_last + beyond * max(step, 0.0)

        return Wait(low=on(last.low, first.low), high=on(last.high, first.high), mid=on(last.mid, first.mid), guess=last.guess)


_SCHEDULES: dict[str, Schedule] = {}
_making: dict[str, threading.Lock] = {}
_making_lock = threading.Lock()
STARTING = Wait(low=0.0, high=0.0, mid=0.0)  # claimed already: it starts now
NEWCOMER_WINDOW = 120.0  # s of submissions that tell how fast students are coming
SHORT_ID = 8  # characters of a job id shown where space is short: its random end


def short_id(job_id: str) -> str:
    """A job id as every page shows it in a list (the web queue, workers, a user's jobs): the
    same cut everywhere, so an id seen on one page can be found on another."""
    return job_id[-SHORT_ID:]


class QueueView:
    """Queue positions, ETAs and why a position is what it is, computed once per queue however
    many jobs are shown (the web queue renders every waiting job each second: one fair-order pass
    and one schedule, not one per job).

    The wait (issues 37 and 49) plays the queue forward (``eta``): each running job ends as a run
    of its kind that lasted longer than it has so far, each job ahead, in the fair order, takes a
    slot for a run of its kind, never past its own wall limit; a range from many such plays, or,
    where history is missing or no longer describes the jobs, a guess bounded by the wall limits
    that says so. A job of a slow kind ahead counts for what it is, and one that outlives its
    estimate makes the range grow."""

    def __init__(self, db: Session, settings: Settings):
        self.db = db
        self.settings = settings
        self._orders: dict[str, list[Job]] = {}
        self._positions: dict[str, dict[str, int]] = {}
        self._etas: dict[str, dict[str, Wait] | None] = {}
        self._deadlines: Deadlines | None = None
        self._runs: dict[str, dict[str, list[tuple[float, bool]]]] = {}  # per queue, kind: latest runs by start
        self._gaps: dict[str, float] = {}  # per queue: a release's typical wait for a worker's claim, s
        self._started: set[str] = set()  # jobs found running while the schedule was made

    def _order(self, queue: str) -> list[Job]:
        if queue not in self._orders:
            s = self.settings
            self._orders[queue] = fair_order(self.db, queue, s.staff_priority, set(s.priority_kinds))
            # ranked runs and the others are released on capacity of their own (fairshare.free_slots): a line each
            self._positions[queue] = {}
            for alone in (False, True):
                line = [j for j in self._orders[queue] if j.reserved == alone]
                self._positions[queue].update({j.id: i for i, j in enumerate(line, start=1)})
        return self._orders[queue]

    def _line(self, job: Job) -> list[Job]:
        """The jobs released on the same capacity as ``job`` (shared slots, or reserved places), in order."""
        return [j for j in self._order(job.queue) if j.reserved == job.reserved]

    def late(self, job: Job) -> str | None:
        """How late the job was submitted after its owner's own deadline, in words; None when on time."""
        if self._deadlines is None:
            self._deadlines = Deadlines(self.db, self.settings)
        late = self._deadlines.late_by(job)
        if late is None:
            return None
        return f"late by {in_words(late)}" + (" (late days)" if self._deadlines.counts(job) else "")

    def position(self, job: Job) -> int | None:
        """1 = next to be released to a worker; the fair-share order, so it is what will happen."""
        if job.state != JobState.queued:
            return None
        if job.released_at is not None:
            return 1
        self._order(job.queue)
        return self._positions[job.queue].get(job.id)

    def why(self, job: Job, position: int | None) -> str | None:
        """Why jobs submitted after this one are ahead of it (what makes a position drop), or None."""
        if position is None or job.released_at is not None:
            return None
        order = self._line(job)
        later = [j for j in order[: position - 1] if (j.created_at, j.id) > (job.created_at, job.id)]
        if not later:
            return None
        s = self.settings
        first = [j for j in later if jumps_line(j, s.staff_priority, s.priority_kinds)]
        n = len(later)
        text = f"{n} job{'s' if n > 1 else ''} submitted after yours {'go' if n > 1 else 'goes'} first: "
        reasons = []
        if first:
            reasons.append(f"{len(first)} of staff or of a kind that goes first ({', '.join(sorted(s.priority_kinds)) or 'none'})")
        if len(first) < n:
            reasons.append(
                "students take turns (fair share): a student whose last job ran longer ago goes before one whose job ran more recently"
            )
        return text + "; ".join(reasons)

    def wait(self, job: Job, position: int | None) -> Wait | None:
        """The job's start as a range, seconds from now (``eta.estimate``: from history, or a guess
        bounded by the wall limits, and saying so). None when not waiting or no live worker
        serves the queue."""
        if position is None:
            return None
        if job.queue not in self._etas:
            self._etas[job.queue] = self._schedule(job.queue)
        etas = self._etas[job.queue]
        if etas is None:
            return None
        if job.id in self._started:  # claimed since its row was read (the first job on an idle service)
            return STARTING
        return etas.get(job.id)

    def eta(self, job: Job, position: int | None) -> float | None:
        """The single figure older clients show (``eta_seconds``): the typical start, or, for a
        guess, the upper end (never an understatement); rounded to 5 s."""
        w = self.wait(job, position)
        return None if w is None else float(5 * round(w.mid / 5))

    def _recent(self, queue: str, ran: dict[str, float]) -> dict[str, list[tuple[float, bool]]]:
        """Each kind's latest runs on the queue by start, newest first (up to ``RECENT_RUNS``):
        (seconds, ended), a running one with how long it has run (``ran``, by job id). By start,
        not by end: in a rush the runs that ended first are the short ones."""
        if queue not in self._runs:
            rows = self.db.execute(
                select(Job.id, Job.kind, Job.state, Job.started_at, Job.finished_at, Job.released_at)
                .where(
                    Job.queue == queue,
                    Job.started_at.is_not(None),
                    Job.waiting.is_(None),
                    Job.state.in_((JobState.running, JobState.succeeded, JobState.failed, JobState.timed_out)),
                )
                .order_by(Job.started_at.desc())
                .limit(200)
            ).all()
            runs: dict[str, list[tuple[float, bool]]] = {}
            gaps: list[float] = []
            for job_id, kind, state, started, ended, released in rows:
                if state == JobState.running:
                    run = (ran.get(job_id, 0.0), False)
                elif ended is None or started is None:
                    continue
                else:
                    run = ((ended - started).total_seconds(), True)
                    if released is not None and len(gaps) < RECENT_RUNS:
                        gaps.append(max((started - released).total_seconds(), 0.0))
                if len(runs.setdefault(kind, [])) < RECENT_RUNS:
                    runs[kind].append(run)
            self._runs[queue] = runs
            self._gaps[queue] = sorted(gaps)[len(gaps) // 2] if gaps else DEFAULT_GAP
        return self._runs[queue]

    def _schedule(self, queue: str) -> dict[str, Wait] | None:
        """Every waiting job's start (``eta.estimate``): the released jobs first (they start as
        soon as a worker takes them), then the fair order. A job of another queue on one of this
        queue's workers holds one of its slots too."""
        live = live_workers(self.db, self.settings.worker_dead_after, queue)
        slots = sum(w.slots for w in live)
        if slots == 0:
            return None
        now = utcnow()
        on_slots: list[tuple[Job, float]] = []
        mine = (Job.queue == queue) & (Job.state == JobState.running)
        for job in self.db.scalars(select(Job).where(or_(mine, runs_on(live)), Job.waiting.is_(None))):
            claimed = job.last_claimed()
            on_slots.append((job, max((now - claimed).total_seconds(), 0.0) if claimed else 0.0))
            self._started.add(job.id)
        released = self.db.scalars(
            select(Job).where(Job.queue == queue, Job.state == JobState.queued, Job.released_at.is_not(None)).order_by(Job.released_at)
        ).all()
        # owners with a job running or ahead in line: a student with no turn yet goes before their next one
        busy = set(self.db.scalars(select(Job.owner_id).where(or_(mine, runs_on(live)))))
        s = self.settings
        waiting = []
        for j in [*released, *self._order(queue)]:
            if j.id in self._started:
                continue
            yields = j.released_at is None and j.owner_id in busy and not jumps_line(j, s.staff_priority, s.priority_kinds)
            waiting.append(Slotted(j.id, j.kind, j.wall_limit(s.wall_seconds), alone=j.reserved, yields=yields))
            busy.add(j.owner_id)
        room = start_now(slots, len(on_slots), waiting)
        running_kinds = [j.kind for j, _ in on_slots]
        kinds = {*running_kinds, *(w.kind for w in waiting)}
        made = _SCHEDULES.get(queue)
        if made is not None and made.fresh(slots, room, kinds):
            return made.answer(running_kinds, waiting)
        asked = time.monotonic()
        with _making_lock:
            making = _making.setdefault(queue, threading.Lock())
        with making:
            made = _SCHEDULES.get(queue)  # made meanwhile, by the request this one waited for
            if made is not None and made.fresh(slots, room, kinds, since=asked):
                return made.answer(running_kinds, waiting)
            # a running job's wall limit (its build file parsed) matters only when the queue is played
            # forward: with an idle slot for every waiting job, nobody waits for a running one to end
            running = [
                Slotted(j.id, j.kind, 0.0 if room else j.wall_limit(s.wall_seconds), ran=ran, alone=j.reserved) for j, ran in on_slots
            ]
            history = self._recent(queue, {r.id: r.ran or 0.0 for r in running})
            etas = estimate(slots, running, waiting, history, self._gaps[queue], None if room else self._newcomers(queue, now))
            whys = {k: known(k, history.get(k, ())).why for k in kinds}
            places = [etas[w.id] for w in waiting if w.id in etas]
            _SCHEDULES[queue] = Schedule(time.monotonic(), slots, room, etas, places, whys)
            return etas

    def _newcomers(self, queue: str, now: datetime) -> Newcomers:
        """Students who may still submit before a job whose owner has one ahead (fair share): at the
        rate students submitted on the queue lately, at most those with nothing in line now."""
        since = now - timedelta(seconds=NEWCOMER_WINDOW)
        lately = self.db.scalar(select(func.count(func.distinct(Job.owner_id))).where(Job.queue == queue, Job.created_at >= since)) or 0
        users = self.db.scalar(select(func.count()).select_from(User).where(User.active.is_(True))) or 0
        in_line = self.db.scalar(select(func.count(func.distinct(Job.owner_id))).where(Job.state.in_(UNFINISHED))) or 0
        return Newcomers(rate=lately / NEWCOMER_WINDOW, most=max(users - in_line, 0))


def shown_state(state: JobState, waiting: bool) -> JobState:
    """What users see: a job a worker handed to Slurm that Slurm has not started yet is queued
    (the database keeps it running: it is claimed, and cancelling it must reach that worker)."""
    return JobState.queued if state is JobState.running and waiting else state


def job_out(db: Session, job: Job, view: QueueView) -> JobOut:
    """The job as the API shows it: the queue's figures first, then what the job's stored facts
    say (its results, its phases), each read once."""
    position = view.position(job)
    wait = view.wait(job, position)
    why, state, late = view.why(job, position), shown_state(job.state, bool(job.waiting)), view.late(job)
    return JobOut(
        id=job.id,
        owner=job.owner.username,
        queue=job.queue,
        kind=job.kind,
        state=state,
        waiting=job.waiting,
        image=job.image,
        created_at=job.created_at,
        released_at=job.released_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
        worker=job.worker,
        exit_code=job.exit_code,
        failed_command=job.failed_command,
        message=job.message,
        position=position,
        eta_seconds=None if wait is None else float(5 * round(wait.mid / 5)),
        eta_low=None if wait is None else float(5 * math.floor(wait.low / 5)),
        eta_high=None if wait is None else float(5 * math.ceil(wait.high / 5)),
        eta_guess=None if wait is None else wait.guess,
        position_why=why,
        gpu_name=job.gpu_name,
        has_build=job.has_build,
        archive_bytes=job.archive_bytes,
        results=summary_of(job),
        phases=job.timeline(),
        late=late,
    )


def summaries(db: Session, settings: Settings, user: User) -> list[QueueSummary]:
    dead_after = settings.worker_dead_after
    counts: Counter[tuple[str, JobState]] = Counter()
    held = Job.waiting.is_not(None)  # claimed, but still waiting in Slurm: shown as waiting
    for queue, state, waits, n in db.execute(
        select(Job.queue, Job.state, held, func.count()).where(Job.state.in_(UNFINISHED)).group_by(Job.queue, Job.state, held)
    ):
        counts[queue, shown_state(state, waits)] += n
    live = live_workers(db, dead_after)
    served = {q for w in live for q in (w.queues or [])}
    view = QueueView(db, settings)
    mine = db.scalars(select(Job).where(Job.owner_id == user.id, Job.state.in_(UNFINISHED)).order_by(Job.created_at)).all()
    # answering: alive, and heard from within a few heartbeats (a killed worker is silent long
    # before it is declared dead)
    recent = utcnow() - timedelta(seconds=2.5 * settings.heartbeat_seconds)
    answering = {w.name for w in live if w.last_seen >= recent}
    unanswered: Counter[str] = Counter(
        q
        for q, worker in db.execute(select(Job.queue, Job.worker).where(Job.state == JobState.running, Job.waiting.is_(None)))
        if worker not in answering
    )
    out = []
    for queue in sorted(served | {q for q, _ in counts} | {j.queue for j in mine}):
        serving = [w for w in live if queue in (w.queues or [])]
        out.append(
            QueueSummary(
                queue=queue,
                waiting=counts[queue, JobState.queued],
                running=counts[queue, JobState.running],
                slots=sum(w.slots for w in serving),
                workers=len(serving),
                mine=[job_out(db, j, view) for j in mine if j.queue == queue],
                unanswered=unanswered[queue],
                dead_after=dead_after,
            )
        )
    return out


def queue_rows(db: Session, settings: Settings) -> dict[str, list[dict[str, Any]]]:
    """Every waiting and running job, as staff see it (``owner_id`` to tell whose it is)."""
    jobs = db.scalars(select(Job).options(joinedload(Job.owner)).where(Job.state.in_(UNFINISHED)).order_by(Job.created_at)).all()
    now = utcnow()
    rows: dict[str, list[dict[str, Any]]] = {"queued": [], "running": []}
    view = QueueView(db, settings)
    for job in jobs:
        out = job_out(db, job, view)
        since = job.started_at if out.state is JobState.running else job.created_at
        rows[out.state.value].append(
            {
                "id": job.id,
                "short": short_id(job.id),
                "owner": job.owner.username,
                "owner_id": job.owner_id,
                "queue": job.queue,
                "kind": job.kind,
                "image": job.image,
                "worker": job.worker or "",
                "position": out.position,
                "eta": out.eta_seconds,
                "eta_low": out.eta_low,
                "eta_high": out.eta_high,
                "eta_guess": out.eta_guess,
                "eta_words": wait_words(out.eta_low, out.eta_high, out.eta_guess),
                "why": out.position_why,
                "waiting": job.waiting,
                "seconds": round((now - since).total_seconds()) if since else 0,
            }
        )
    rows["queued"].sort(key=lambda r: (r["position"] is None, r["position"] or 0, r["queue"]))  # who goes next first
    return rows


def shown_to(rows: dict[str, list[dict[str, Any]]], user_id: int, staff: bool) -> dict[str, list[dict[str, Any]]]:
    """The queue as one user may see it: others' jobs anonymous to students."""
    view: dict[str, list[dict[str, Any]]] = {}
    for state, jobs in rows.items():
        view[state] = []
        for row in jobs:
            mine = row["owner_id"] == user_id
            shown = staff or mine
            view[state].append(
                {
                    **{k: v for k, v in row.items() if k != "owner_id"},
                    "mine": mine,
                    "id": row["id"] if shown else None,
                    "short": row["short"] if shown else None,
                    "owner": row["owner"] if shown else "another student",
                }
            )
    return view


def queue_snapshot(db: Session, settings: Settings, p: Principal) -> dict[str, Any]:
    return shown_to(queue_rows(db, settings), p.user.id, can_see_all_jobs(p))
