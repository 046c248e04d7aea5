"""Records what NVML answers on this GPU host, for the worker's unit tests (issue 32's fixtures):
the raw process records while a CUDA program holds the GPU (and its pid), the raw throttle-reason
masks busy and idle, and the GPU state the worker keeps per timed run. Stdlib only (the worker's
nvml module by path): runs on the device host as it is.

    python3 bench/nvml_record.py     # writes $OUT/nvml-h100.json
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "worker"))
from raiworker.gpu.nvml import Nvml, parse_processes  # noqa: E402

OUT = Path(os.environ.get("OUT", "/tmp"))
HOLD = r"""
#include <cstdio>
#include <unistd.h>
__global__ void spin(float *x, long n) { for (long i = 0; i < n; ++i) x[threadIdx.x] += 1.0f; }
int main() {
  float *x; cudaMalloc(&x, 256 << 20);
  printf("ready %d\n", getpid()); fflush(stdout);
  for (int k = 0; k < 40; ++k) { spin<<<1, 32>>>(x, 2000000); cudaDeviceSynchronize(); }
  sleep(1);
  return 0;
}
"""


def throttle_mask(nv: Nvml) -> int:
    dev = nv._device(0)
    mask = ctypes.c_ulonglong()
    nv.lib.nvmlDeviceGetCurrentClocksThrottleReasons(dev, ctypes.byref(mask))
    return mask.value


def main() -> None:
    nv = Nvml.open()
    if nv is None:
        raise SystemExit("no NVML here")
    src = Path("/tmp/hold.cu")
    src.write_text(HOLD)
    nvcc = next((p for p in ("/usr/local/cuda/bin/nvcc", "/usr/local/cuda-13.0/bin/nvcc") if Path(p).exists()), "nvcc")
    subprocess.run([nvcc, "-o", "/tmp/hold", str(src)], check=True)
    idle = {"state": nv.state(0), "throttle_mask": throttle_mask(nv)}
    fn = nv.lib.nvmlDeviceGetComputeRunningProcesses_v3
    idle["raw_processes"] = (nv.raw_processes(fn, nv._device(0)) or b"").hex()
    proc = subprocess.Popen(["/tmp/hold"], stdout=subprocess.PIPE, text=True)
    pid = int(proc.stdout.readline().split()[1])  # type: ignore[union-attr]
    time.sleep(1.0)
    raw = nv.raw_processes(fn, nv._device(0)) or b""
    busy = {
        "pid": pid,
        "raw_processes": raw.hex(),
        "parsed": parse_processes(raw),
        "state": nv.state(0),
        "throttle_mask": throttle_mask(nv),
    }
    proc.wait(120)
    record = {
        "gpu": subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.strip(),
        "driver": subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True
        ).stdout.strip(),
        "idle": idle,
        "busy": busy,
    }
    (OUT / "nvml-h100.json").write_text(json.dumps(record, indent=2))
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
