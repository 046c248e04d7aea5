"""What a worker process learns once at start and keeps: its settings, the GPUs it found and the
slots it offers. Built by ``raiworker run`` (nothing runs ``nvidia-smi`` on import)."""

from __future__ import annotations

from dataclasses import dataclass

from raiprotocol.models import GpuInfo

from .config import WorkerSettings
from .gpu.holds import discover


@dataclass(frozen=True)
class WorkerRuntime:
    settings: WorkerSettings
    gpus: list[GpuInfo]
    slots: int

    @property
    def processes(self) -> int:
        """The pool: a process per slot, and one in which a ranked run waits for the host without
        taking a slot (``run.places``; issue 32)."""
        return self.slots + 1

    @classmethod
    def start(cls, settings: WorkerSettings) -> WorkerRuntime:
        gpus = discover(settings.gpus)
        return cls(settings, gpus, settings.slots or max(len(gpus) * settings.per_gpu, 1))
