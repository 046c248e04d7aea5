"""Executors: where a job's commands actually run (a Docker container, plain processes, a Slurm job).

Adding one: a module here with an ``Executor`` subclass, and a line in ``names.EXECUTORS``. Its lifecycle
hooks (``prepare_host`` as the worker starts, ``host_stopping`` as it stops, ``create`` per job)
hold whatever it needs outside a job; nothing else names executors.
"""

from __future__ import annotations

import importlib

from ..config import WorkerSettings
from ..errors import ExecutorUnavailable
from .base import Executor, JobContext, Outcome, execute
from .names import EXECUTORS


def executor_class(name: str) -> type[Executor]:
    """The executor class named ``name``; its module is imported only now, when chosen (a Slurm
    login node need not have the Docker SDK). A name not in the table (RAI_EXECUTOR mistyped) is
    refused with the names there are, as the worker starts."""
    check_name(name)
    module, _, cls = EXECUTORS[name].partition(":")
    found: type[Executor] = getattr(importlib.import_module(module), cls)
    return found


def check_name(name: str) -> None:
    """Refuses a name not in the table (RAI_EXECUTOR mistyped) with the names there are, importing nothing."""
    if name not in EXECUTORS:
        raise ExecutorUnavailable(f"unknown executor {name!r} (RAI_EXECUTOR); one of: {', '.join(EXECUTORS)}")


def make_executor(settings: WorkerSettings) -> Executor:
    return executor_class(settings.executor).create(settings)


__all__ = ["EXECUTORS", "Executor", "JobContext", "Outcome", "check_name", "execute", "executor_class", "make_executor"]
