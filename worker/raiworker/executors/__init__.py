"""Executors: where a job's commands actually run (a Docker container, plain processes, a Slurm job)."""

from __future__ import annotations

from ..config import WorkerSettings
from .base import Executor, JobContext, Outcome, execute


def make_executor(settings: WorkerSettings) -> Executor:
    if settings.executor == "docker":
        from .docker import DockerExecutor

        return DockerExecutor(spares=settings.spare_containers)
    if settings.executor == "slurm":
        from .slurm import SlurmExecutor

        return SlurmExecutor()
    from .process import ProcessExecutor

    return ProcessExecutor()


__all__ = ["Executor", "JobContext", "Outcome", "execute", "make_executor"]
