"""The physics floor of a ranked run (issue 46): no run of the course's operations can take less
than its floating-point work at the card's peak, nor less than its memory traffic at the card's
bandwidth. A measured total below that is not a fast kernel but a measurement the job got around:
it does not rank, says so, and is listed for staff (quarantine).

The peaks are the most generous a card has for results of fp32 accuracy (dense TF32 tensor-core
throughput, which 3xTF32 emulation can turn into fp32-accurate results, and the HBM bandwidth), so
an honest run is never below its floor. A course may instead state the floor itself
(``ranked.floor_seconds``), e.g. for a CPU stand-in.
"""

from __future__ import annotations

from raiprotocol.spec import Ranked

# NVML's name (a part of it, first match wins) -> (FLOP/s, bytes/s)
PEAKS: list[tuple[str, float, float]] = [
    ("H200", 495e12, 4.8e12),
    ("H100 NVL", 418e12, 3.9e12),
    ("H100 PCIe", 378e12, 2.0e12),
    ("H100", 495e12, 3.35e12),
    ("GH200", 495e12, 4.9e12),
    ("A100", 156e12, 2.04e12),
    ("L40S", 183e12, 0.864e12),
    ("L4", 60e12, 0.3e12),
    ("A10", 62.5e12, 0.6e12),
    ("T4", 8.1e12, 0.32e12),
]


def peaks_of(gpu_name: str | None) -> tuple[float, float] | None:
    for part, flops, bandwidth in PEAKS:
        if gpu_name and part in gpu_name:
            return flops, bandwidth
    return None


def floor_seconds(ranked: Ranked, gpu_name: str | None) -> float | None:
    """The least time a timed run of the course's operations can take on this GPU (None: unknown)."""
    if ranked.floor_seconds is not None:
        return ranked.floor_seconds
    peaks = peaks_of(gpu_name)
    if peaks is None or (ranked.flops is None and ranked.bytes is None):
        return None
    return max((ranked.flops or 0) / peaks[0], (ranked.bytes or 0) / peaks[1])
