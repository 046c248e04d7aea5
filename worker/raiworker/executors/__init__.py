"""Executors: where a job's commands actually run (a Docker container, plain processes, a Slurm job).

Adding one: a module here with an ``Executor`` subclass, and a line in ``EXECUTORS``. Its lifecycle
hooks (``prepare_host`` as the worker starts, ``host_stopping`` as it stops, ``create`` per job)
hold whatever it needs outside a job; nothing else names executors.
"""

from __future__ import annotations

import importlib

from ..config import WorkerSettings
from .base import Executor, JobContext, Outcome, execute

# RAI_EXECUTOR's values: the module (imported only when chosen: a Slurm login node need not have
# the Docker SDK) and the class
EXECUTORS: dict[str, tuple[str, str]] = {
    "docker": (".docker", "DockerExecutor"),
    "process": (".process", "ProcessExecutor"),
    "slurm": (".slurm", "SlurmExecutor"),
}


def executor_class(name: str) -> type[Executor]:
    module, cls = EXECUTORS[name]
    return getattr(importlib.import_module(module, __package__), cls)


def make_executor(settings: WorkerSettings) -> Executor:
    return executor_class(settings.executor).create(settings)


__all__ = ["EXECUTORS", "Executor", "JobContext", "Outcome", "execute", "executor_class", "make_executor"]
