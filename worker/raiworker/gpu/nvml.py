"""NVML from the host, through ctypes (the driver's libnvidia-ml.so.1; no Python package needed):
the GPU's clocks, temperature, power and throttle reasons and the processes using it, looked at
around a ranked job's timed run (``GpuWatch``), and a shared run's GPU memory (``MemoryShare``).
Read-only: nothing here changes a GPU setting.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("raiworker")

_SM, _MEM = 0, 2  # nvmlClockType_t: NVML_CLOCK_SM, NVML_CLOCK_MEM
# nvmlClocksEventReasons (throttle reasons) that slow a run down, by bit
SLOWDOWNS = {
    0x2: "applications clocks setting",
    0x4: "software power cap",
    0x8: "hardware slowdown",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "hardware power brake",
}


class _Process(ctypes.Structure):  # nvmlProcessInfo_t (v2/v3 layout)
    _fields_ = [
        ("pid", ctypes.c_uint),
        ("usedGpuMemory", ctypes.c_ulonglong),
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
    ]


class Nvml:
    """The few NVML calls rai needs; None from ``open()`` where there is no driver."""

    def __init__(self, lib: Any):
        self.lib = lib

    @classmethod
    def open(cls) -> Nvml | None:
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            if lib.nvmlInit_v2() != 0:
                return None
        except OSError:
            return None
        return cls(lib)

    def _device(self, index: int) -> ctypes.c_void_p | None:
        handle = ctypes.c_void_p()
        return handle if self.lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(index), ctypes.byref(handle)) == 0 else None

    def compute_pids(self, index: int) -> list[int]:
        return parse_processes(self._compute_records(index))

    def process_memory(self, index: int) -> dict[int, int]:
        """Each process using the GPU now: the device memory it holds, in bytes."""
        return parse_memory(self._compute_records(index))

    def _compute_records(self, index: int) -> bytes:
        dev = self._device(index)
        if dev is None:
            return b""
        for name in ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"):
            fn = getattr(self.lib, name, None)
            if fn is None:
                continue
            raw = self.raw_processes(fn, dev)
            if raw is not None:
                return raw
        return b""

    @staticmethod
    def raw_processes(fn: Any, dev: ctypes.c_void_p) -> bytes | None:
        """The driver's answer as it gave it: ``count`` records of nvmlProcessInfo_t (what the H100
        fixture holds)."""
        count = ctypes.c_uint(64)
        infos = (_Process * 64)()
        if fn(dev, ctypes.byref(count), infos) != 0:
            return None
        return bytes(infos)[: min(count.value, 64) * ctypes.sizeof(_Process)]

    def state(self, index: int) -> dict[str, Any]:
        """The GPU now: SM and memory clocks (MHz), temperature (°C), power (W), throttle reasons."""
        dev = self._device(index)
        if dev is None:
            return {}
        out: dict[str, Any] = {}
        value = ctypes.c_uint()
        if self.lib.nvmlDeviceGetClockInfo(dev, _SM, ctypes.byref(value)) == 0:
            out["sm_mhz"] = value.value
        if self.lib.nvmlDeviceGetClockInfo(dev, _MEM, ctypes.byref(value)) == 0:
            out["mem_mhz"] = value.value
        if self.lib.nvmlDeviceGetTemperature(dev, 0, ctypes.byref(value)) == 0:
            out["temp_c"] = value.value
        if self.lib.nvmlDeviceGetPowerUsage(dev, ctypes.byref(value)) == 0:
            out["power_w"] = round(value.value / 1000, 1)
        reasons = ctypes.c_ulonglong()
        if self.lib.nvmlDeviceGetCurrentClocksThrottleReasons(dev, ctypes.byref(reasons)) == 0:
            out["throttle"] = slowdowns(reasons.value)
        return out


def parse_processes(raw: bytes) -> list[int]:
    """The pids in the driver's records of the processes using a GPU (whole records only)."""
    n = len(raw) // ctypes.sizeof(_Process)
    return [rec.pid for rec in (_Process * n).from_buffer_copy(raw[: n * ctypes.sizeof(_Process)])]


def parse_memory(raw: bytes) -> dict[int, int]:
    """pid -> device memory held (bytes) from the driver's records; 'not available' counts as 0."""
    n = len(raw) // ctypes.sizeof(_Process)
    records = (_Process * n).from_buffer_copy(raw[: n * ctypes.sizeof(_Process)])
    return {rec.pid: 0 if rec.usedGpuMemory == NOT_AVAILABLE else int(rec.usedGpuMemory) for rec in records}


NOT_AVAILABLE = 0xFFFFFFFFFFFFFFFF  # NVML_VALUE_NOT_AVAILABLE (unsigned long long)


def slowdowns(mask: int) -> list[str]:
    """The throttle reasons in a mask that slow a run down (idle and the like are not)."""
    return [why for bit, why in SLOWDOWNS.items() if mask & bit]


def in_cgroup(pid: int, container_id: str) -> bool:
    """Whether a host process belongs to the container (by its cgroup)."""
    try:
        with open(f"/proc/{pid}/cgroup") as fh:
            return container_id in fh.read()
    except OSError:
        return False


class MemoryShare:
    """A shared run's share of its GPU's memory, watched (issue 38): time-slicing has no per-job
    limit, so the job's processes' device memory is summed every ``interval`` seconds and the first
    time it is over ``limit`` bytes, ``over(used)`` is told (the executor kills the job and says
    why). A best effort: an allocation made and used between two samples is not seen, and a
    neighbour may fail first; CUDA MPS's per-client limit would be the real one."""

    def __init__(
        self, nvml: Any, index: int, belongs: Callable[[int], bool], limit: int, over: Callable[[int], None], interval: float = 0.25
    ) -> None:
        self.nvml, self.index, self.belongs, self.limit, self.over, self.interval = nvml, index, belongs, limit, over, interval
        self.most = 0
        self.fired = False
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpu-memory-share", daemon=True)

    def start(self) -> MemoryShare:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._done.wait(self.interval) and not self.fired:
            try:
                self.sample()
            except Exception:  # noqa: BLE001 - a driver hiccup: sampled again next time
                log.exception("sampling the job's GPU memory failed")

    def sample(self) -> int:
        used = int(sum(mem for pid, mem in self.nvml.process_memory(self.index).items() if self.belongs(pid)))
        self.most = max(self.most, used)
        if used > self.limit and not self.fired:
            self.fired = True
            self.over(used)
        return used

    def stop(self) -> None:
        self._done.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)


@dataclass
class GpuWatch:
    """The GPU looked at just before a timed run and just after its freeze, never while it runs (an
    NVML call takes the driver's locks: a sampler beside the operations was noise in them): its
    state, and how many processes of anyone but the run (another job, the operator's) used it."""

    nvml: Nvml
    indexes: list[int]
    belongs: Callable[[int], bool]  # a host pid is the run's (in its container's cgroup)
    states: list[dict[str, Any]] = field(default_factory=list)

    def start(self) -> GpuWatch:
        self.states.append(self._state())
        return self

    def stop(self) -> None:
        """After the run (rai-timed killed its processes: one still letting go of its context is the run's)."""
        self.states.append(self._state())

    def _state(self) -> dict[str, Any]:
        if not self.indexes:
            return {}
        state = self.nvml.state(self.indexes[0])
        others = [
            pid for i in self.indexes for pid in self.nvml.compute_pids(i) if os.path.exists(f"/proc/{pid}") and not self.belongs(pid)
        ]
        return state | ({"others": len(others)} if others else {})
