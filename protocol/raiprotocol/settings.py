"""What the server's and the worker's settings share: the names of the concepts both use (Redis,
the worker token, the wall-time and memory caps), how lists are written in the environment
(``RAI_QUEUES=gpu,cpu``), the secrets file, and refusing renamed variables at start rather than
ignoring them (an ignored cap is a silent default)."""

from __future__ import annotations

import os
from typing import Annotated, Any, TypeVar

from pydantic import BeforeValidator, ValidationError, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


def _split(value: Any) -> Any:
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    return value


CommaList = Annotated[list[str], NoDecode, BeforeValidator(_split)]
"""A list written ``a,b,c`` in the environment (JSON is not asked of operators)."""

RENAMED = {"RAI_JOB_WALL_SECONDS": "RAI_WALL_SECONDS", "RAI_JOB_MEMORY_MB": "RAI_MEMORY_MB"}


_Settings = TypeVar("_Settings", bound="SharedSettings")
_SECRET_WORDS = ("TOKEN", "SECRET", "KEY", "PASSWORD", "URL")  # their values are not echoed


def settings_problem(exc: ValueError) -> str:
    """A refused setting as the operator wrote it: ``RAI_PROFILER_TURN_SECONDS: Input should be
    greater than 0 (it is '0')``, not pydantic's field name and help link."""
    if not isinstance(exc, ValidationError):
        return str(exc)
    lines = []
    for error in exc.errors():
        loc = error.get("loc") or ()
        name = f"RAI_{str(loc[0]).upper()}" if loc else ""
        msg = error["msg"].removeprefix("Value error, ")
        if not loc or name in msg:  # a check of ours that says it all
            lines.append(msg)
            continue
        line = f"{name}: {msg}"
        given = error.get("input")
        if isinstance(given, str | int | float) and not any(word in name for word in _SECRET_WORDS):
            line += f" (it is {given!r})"
        lines.append(line)
    return "; ".join(lines)


class SharedSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RAI_", env_file=None, extra="ignore")

    redis_url: str = "redis://127.0.0.1:6379/0"
    worker_token: str = "change-me-worker-token"
    # The caps on every job, whatever its build file asks: the server puts them in each grant and
    # a worker applies its own (a smaller host) on top. One name for both sides.
    wall_seconds: int = 3600
    memory_mb: int = 8192
    # A worker beats every heartbeat_seconds; the server takes it for dead (and requeues its jobs)
    # after worker_dead_after without one: several missed beats, seconds not minutes. Both sides
    # read both, so they cannot disagree.
    heartbeat_seconds: float = 3.0
    worker_dead_after: float = 15.0
    # Each run holds a lease that its worker renews every heartbeat_seconds (over HTTP and through
    # Redis: either will do). A run that could renew neither for worker_dead_after stops itself;
    # the server hands its job to another worker only lease_margin later, so that a run cut off
    # from the server (paused, partitioned) has stopped before its job runs anywhere else.
    lease_margin: float = 5.0

    @property
    def visibility_timeout(self) -> int:
        """How long Redis keeps a delivered task before handing it out again: past any job's wall
        clock, twice over. Server (dispatch) and workers (consume) must agree on it."""
        return self.wall_seconds * 2 + 600

    @model_validator(mode="before")
    @classmethod
    def _no_renamed(cls, data: Any) -> Any:
        old = [name for name in RENAMED if name in os.environ]
        if old:
            raise ValueError("; ".join(f"{name} is now {RENAMED[name]}" for name in old))
        return data

    @classmethod
    def load(cls: type[_Settings]) -> _Settings:
        """From the environment, and from RAI_SECRETS_FILE (``raiserver secrets``) for what it leaves unset."""
        return cls(_env_file=os.environ.get("RAI_SECRETS_FILE") or None)
