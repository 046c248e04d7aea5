"""The job states and the client's exit statuses: plain enums, importable without pydantic (the
client's submit path reads them before, or instead of, the wire models)."""

from __future__ import annotations

from enum import Enum, IntEnum


class JobState(str, Enum):
    queued = "queued"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    timed_out = "timed_out"
    cancelled = "cancelled"
    error = "error"

    @property
    def finished(self) -> bool:
        return self not in UNFINISHED


UNFINISHED = (JobState.queued, JobState.running)  # a job's "active" states, everywhere they are asked for


class ExitCode(IntEnum):
    """The client's exit status; a failed job exits with its failing command's own code."""

    OK = 0
    CLIENT_ERROR = 2  # bad build file, unreachable server, rejected credentials
    TIMED_OUT = 124
    INFRA_ERROR = 125
    DETACHED = 130  # Ctrl-C: the job goes on
    CANCELLED = 143


def exit_code_for(state: JobState, exit_code: int | None) -> int:
    """What the client exits with for a finished job: a failed job's own code, else by state."""
    if state is JobState.succeeded:
        return ExitCode.OK
    if state is JobState.failed:
        return exit_code if exit_code not in (None, 0) else 1
    return {JobState.timed_out: ExitCode.TIMED_OUT, JobState.cancelled: ExitCode.CANCELLED}.get(state, ExitCode.INFRA_ERROR)
