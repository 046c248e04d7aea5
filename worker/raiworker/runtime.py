"""What a worker process learns once at start and keeps: its settings, the GPUs it found and the
slots it offers. Built by ``raiworker run`` (nothing runs ``nvidia-smi`` on import)."""

from __future__ import annotations

from dataclasses import dataclass

from raiprotocol.models import GpuInfo

from .config import WorkerSettings
from .gpus import discover


@dataclass(frozen=True)
class WorkerRuntime:
    settings: WorkerSettings
    gpus: list[GpuInfo]
    slots: int

    @property
    def processes(self) -> int:
        """The pool: a process per slot. (One more, for ranked runs to wait in without a slot, made
        Celery give up when Redis restarted while it polled with a job unacknowledged: kombu's
        restore met a closed connection. See README, issue 32.)"""
        return self.slots

    @classmethod
    def start(cls, settings: WorkerSettings) -> WorkerRuntime:
        gpus = discover(settings.gpus)
        return cls(settings, gpus, settings.slots or max(len(gpus) * settings.per_gpu, 1))
