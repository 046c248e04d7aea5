"""How a job's container reaches exactly its GPUs, decided once when the worker starts and said in
its start-up line:

- ``runtime``: the engine has the NVIDIA container runtime: a device request for the job's GPUs
  (what ``docker run --gpus`` does).
- ``devices``: no such runtime (a plain Debian ``docker.io``, Podman, a host without the NVIDIA
  toolkit), but the driver is there: the device nodes of exactly the job's GPUs plus the control
  nodes (``/dev/nvidiactl``, ``/dev/nvidia-uvm``…), and the driver's user-space libraries and tools
  mounted read-only under ``/usr/local/nvidia`` (where CUDA images look: ``LD_LIBRARY_PATH``), found
  with ``ldconfig -p`` or named by ``RAI_DRIVER_PATHS``. This is what the runtime itself does.
- ``none``: neither works here; a job that asks for a GPU fails with this sentence, never runs
  without its GPU.

A job granted no GPU gets no NVIDIA device node in either mode: it sees none.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from docker.types import DeviceRequest, Mount

from ..errors import ExecutorUnavailable

LIB_DIR, BIN_DIR = "/usr/local/nvidia/lib64", "/usr/local/nvidia/bin"
# the driver's user-space parts a CUDA program, nvidia-smi and the profilers use (as the NVIDIA
# container toolkit lists them for the compute and utility capabilities)
DRIVER_LIBS = re.compile(
    r"^lib(cuda|cudadebugger|nvidia-(ml|ptxjitcompiler|nvvm|gpucomp|cfg|opencl|allocator|pkcs11|"
    r"fatbinaryloader|compiler|encode|opticalflow)|nvcuvid)\.so"
)
DRIVER_TOOLS = ("nvidia-smi", "nvidia-debugdump")
CONTROL_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")


@dataclass(frozen=True)
class GpuAccess:
    mode: str  # "runtime" | "devices" | "none"
    why: str
    files: list[tuple[str, str]] = field(default_factory=list)  # (host path, path in the container), read-only
    minors: dict[str, int] = field(default_factory=dict)  # GPU index (as jobs are granted it) -> /dev/nvidiaN

    def container_options(self, gpu_ids: list[str], image_env: list[str]) -> dict[str, Any]:
        """The Docker SDK's ``containers.run`` options that give a container exactly these GPUs."""
        if not gpu_ids:
            return {}
        if self.mode == "runtime":
            return {"device_requests": [DeviceRequest(device_ids=gpu_ids, capabilities=[["gpu"]])]}
        if self.mode != "devices":
            raise ExecutorUnavailable(f"this worker cannot give a container its GPU: {self.why}")
        nodes = [n for n in CONTROL_NODES if os.path.exists(n)]
        nodes += [f"/dev/nvidia{self.minors.get(i, int(i))}" for i in gpu_ids]
        old = dict(e.split("=", 1) for e in image_env if "=" in e)
        libs = LIB_DIR + (":" + old["LD_LIBRARY_PATH"] if old.get("LD_LIBRARY_PATH") else "")
        path = old.get("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        return {
            "devices": [f"{n}:{n}:rwm" for n in nodes],
            "mounts": [Mount(inside, host, type="bind", read_only=True) for host, inside in self.files],
            "environment": {"LD_LIBRARY_PATH": libs, "PATH": path if BIN_DIR in path.split(":") else f"{path}:{BIN_DIR}"},
        }

    @property
    def line(self) -> str:
        return f"GPU access: {self.mode} ({self.why})"


def detect(setting: str, driver_paths: list[str], engine_runtimes: dict[str, Any] | None, gpu_indexes: list[int]) -> GpuAccess:
    """``setting``: auto, runtime or devices (RAI_GPU_ACCESS); ``engine_runtimes``: ``docker info``'s."""
    if not gpu_indexes:
        return GpuAccess("none", "no GPU on this host")
    has_runtime = "nvidia" in (engine_runtimes or {})
    if setting == "runtime" or (setting == "auto" and has_runtime):
        why = (
            "the engine has the NVIDIA container runtime" if has_runtime else "RAI_GPU_ACCESS=runtime (the engine lists no nvidia runtime)"
        )
        return GpuAccess("runtime", why)
    missing = [n for n in CONTROL_NODES[:2] if not os.path.exists(n)]
    if missing:
        return GpuAccess("none", f"no NVIDIA container runtime, and no {' or '.join(missing)} on this host")
    files = driver_files(driver_paths)
    if not any(Path(inside).name.startswith("libcuda.so") for _, inside in files):
        return GpuAccess(
            "none",
            "no NVIDIA container runtime, and the driver's libcuda.so was not found "
            "(ldconfig -p lists none; name its folder in RAI_DRIVER_PATHS)",
        )
    where = sorted({str(Path(host).parent) for host, _ in files})
    return GpuAccess(
        "devices",
        f"no NVIDIA container runtime: device nodes and {len(files)} driver files from {', '.join(where)} mounted read-only",
        files,
        gpu_minors(gpu_indexes),
    )


def driver_files(named: list[str]) -> list[tuple[str, str]]:
    """(host path, container path) of the driver's libraries and tools: from RAI_DRIVER_PATHS
    (files, or folders whose NVIDIA files are taken), else from ``ldconfig -p`` and PATH."""
    libs: dict[str, str] = {}  # soname -> real file on the host
    tools: dict[str, str] = {}
    candidates: list[Path] = []
    if named:
        for entry in map(Path, named):
            candidates += sorted(entry.iterdir()) if entry.is_dir() else [entry]
    else:
        candidates = [Path(p) for p in _ldconfig_paths()]
        candidates += [Path(found) for tool in DRIVER_TOOLS if (found := shutil.which(tool) or _nvidia_bin(tool))]
    for path in candidates:
        if DRIVER_LIBS.match(path.name) and path.exists():
            libs.setdefault(path.name, os.path.realpath(path))
        elif path.name in DRIVER_TOOLS and path.exists():
            tools.setdefault(path.name, os.path.realpath(path))
    return [(host, f"{LIB_DIR}/{name}") for name, host in sorted(libs.items())] + [
        (host, f"{BIN_DIR}/{name}") for name, host in sorted(tools.items())
    ]


def _nvidia_bin(tool: str) -> str | None:
    path = Path(BIN_DIR) / tool
    return str(path) if path.exists() else None


def _ldconfig_paths() -> list[str]:
    try:
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    paths = []
    for line in out.splitlines():  # "\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1"
        name, _, path = line.strip().partition(" => ")
        soname, _, arch = name.partition(" ")
        if path and DRIVER_LIBS.match(soname) and arch.strip() != "(libc6)":  # "(libc6)" alone: a 32-bit library
            paths.append(path.strip())
    return paths


def gpu_minors(indexes: list[int]) -> dict[str, int]:
    """nvidia-smi's index -> the minor number of its /dev/nvidiaN (they may differ), from the driver's
    /proc files by PCI bus id; the index itself where that cannot be read."""
    minors = {str(i): i for i in indexes}
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,pci.bus_id", "--format=csv,noheader"], capture_output=True, text=True, timeout=20, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return minors
    for row in out.strip().splitlines():
        index, _, bus = (p.strip() for p in row.partition(","))
        domain, _, rest = bus.partition(":")  # nvidia-smi: 00000000:1B:00.0; /proc: 0000:1b:00.0
        try:
            text = (Path("/proc/driver/nvidia/gpus") / f"{int(domain, 16):04x}:{rest.lower()}" / "information").read_text()
        except (OSError, ValueError):
            continue
        m = re.search(r"Device Minor:\s*(\d+)", text)
        if m:
            minors[index] = int(m.group(1))
    return minors


_access: GpuAccess | None = None


def current(settings: Any, gpu_indexes: list[int], engine_runtimes: Callable[[], dict[str, Any] | None]) -> GpuAccess:
    """This process's GpuAccess, decided once (the worker's main process decides; its pool inherits);
    ``engine_runtimes`` is asked only then."""
    global _access
    if _access is None:
        _access = detect(settings.gpu_access, settings.driver_paths, engine_runtimes(), gpu_indexes)
    return _access
