"""Which state of a job may follow which, each change a named rule (in the manner of Prefect's
orchestration rules: the states a rule starts from and those it leads to), and the one policy that
lists them. ``jobs/lifecycle.py`` makes every change through ``move``; the table also holds for any
other code that sets ``Job.state`` (a listener refuses a change no rule allows), so "an ended job
never runs again" is a property of the model, not a habit of its callers.

After a change the database holds, ``fence`` tells Redis which attempt may write.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import redis
from sqlalchemy import event

from raiprotocol.models import JobState
from raiserver.errors import Conflict
from raiserver.parts import Services
from raiserver.store.tables import Job

log = logging.getLogger("raiserver")

QUEUED, RUNNING = JobState.queued, JobState.running
ENDED = frozenset(s for s in JobState if s.finished)


@dataclass(frozen=True)
class Rule:
    name: str
    from_states: frozenset[JobState]
    to_states: frozenset[JobState]
    why: str

    def allows(self, old: JobState, new: JobState) -> bool:
        return old in self.from_states and new in self.to_states


CLAIM = Rule(
    "claim",
    frozenset({QUEUED, RUNNING}),
    frozenset({RUNNING}),
    "a worker takes a released job; from running: its own lost run, or another's once the lease lapsed",
)
PROGRESS = Rule("progress", frozenset({RUNNING}), frozenset({RUNNING}), "a run reports it waits in, or started in, a batch system")
REQUEUE = Rule(
    "requeue",
    frozenset({RUNNING, QUEUED}),
    frozenset({QUEUED}),
    "the run was lost (worker gone, lease lapsed, batch node failed) or its release never claimed: a new attempt",
)
FINISH = Rule("finish", frozenset({QUEUED, RUNNING}), ENDED, "a run ended, or the job ended without one (cancelled, gave up)")

POLICY: tuple[Rule, ...] = (CLAIM, PROGRESS, REQUEUE, FINISH)
"""Every change a job's state may make. Cancelling is FINISH (a queued job) or a flag the run
obeys (a running one); a re-run or a re-measure is a new job, the original's state untouched."""


def rule_for(old: JobState, new: JobState) -> Rule | None:
    return next((r for r in POLICY if r.allows(old, new)), None)


def move(job: Job, rule: Rule, to: JobState) -> None:
    """Change the job's state by ``rule``; Conflict (the API's 409) when the rule does not start
    from the job's state: a stale or repeated report, never a silent overwrite."""
    if not rule.allows(job.state, to):
        raise Conflict(f"job {job.id} is {job.state.value}: it cannot {rule.name} to {to.value}")
    job.state = to


@event.listens_for(Job.state, "set", active_history=True)
def _only_by_a_rule(target: Job, value: Any, oldvalue: Any, initiator: Any) -> None:
    """Any code setting a job's state goes through the table: a new job starts where it likes, a
    loaded one moves only as a rule allows (an ended job never becomes queued or running again)."""
    if not isinstance(oldvalue, JobState) or oldvalue == value:
        return  # a new object (no old value) or no change
    if rule_for(oldvalue, JobState(value)) is None:
        raise ValueError(f"job {target.id}: no rule takes a job from {oldvalue.value} to {JobState(value).value}")


def fence(svc: Services, job: Job) -> None:
    """Tell Redis which attempt of the job may write, once the database holds it: the job's
    attempt, or "end". Should Redis be away, the reaper puts the fence back from the database."""
    s = svc.settings
    try:
        if job.state.finished:
            svc.fences.raise_to(job.id, "end", s.log_ttl_seconds + s.visibility_timeout)
        else:
            svc.fences.raise_to(job.id, job.attempt, s.visibility_timeout)
    except redis.RedisError as exc:
        log.warning("job %s: fence not set (%s); the reaper sets it again", job.id, exc)
