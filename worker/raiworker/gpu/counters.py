"""The GPU's performance counters: whether jobs (not root, no capabilities) may read them.

NVIDIA's driver can restrict them to administrators (``NVreg_RestrictProfilingToAdminUsers=1``, the
default on some distributions); ``ncu`` in a job then fails with ERR_NVGPUCTRPERM. Nothing rai
does inside a container can lift that safely (CAP_SYS_ADMIN would), so the worker says it at start
and a job whose profiler hit it gets one line saying why and where the fix is, instead of a
student guessing from ncu's error.
"""

from __future__ import annotations

from pathlib import Path

PARAMS = Path("/proc/driver/nvidia/params")
REFUSED = "ERR_NVGPUCTRPERM"  # what ncu (and Nsight's other tools) print when the driver refuses
FIX = "the operator can allow them with the driver option NVreg_RestrictProfilingToAdminUsers=0 (docs/gpu.md, 'GPU profiling counters')"


def restricted(params: Path = PARAMS) -> bool | None:
    """The driver's RmProfilingAdminOnly; None where the driver does not say (no NVIDIA driver)."""
    try:
        text = params.read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "RmProfilingAdminOnly":
            return value.strip() not in ("0", "")
    return None


def startup_line(params: Path = PARAMS) -> str | None:
    """For the worker's start: whether jobs can profile the GPU, or None without an NVIDIA driver."""
    state = restricted(params)
    if state is None:
        return None
    if state:
        return f"GPU profiling counters: restricted to administrators (RmProfilingAdminOnly: 1): ncu in jobs fails; {FIX}"
    return "GPU profiling counters: open to jobs (RmProfilingAdminOnly: 0)"


def refused_line(worker: str) -> str:
    """For a job's log, once, when its profiler was refused the counters."""
    return (
        f"The profiler could not read the GPU's performance counters: worker {worker} restricts them to "
        f"administrators, and jobs run without privileges. The rest of the job is not affected; {FIX}."
    )
