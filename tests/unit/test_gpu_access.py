"""How a job's container reaches its GPU without the NVIDIA runtime (issue 24), on a fake driver
layout: exactly the job's device nodes, the driver's files read-only where CUDA images look."""

from __future__ import annotations

from raiworker.gpu import access as gpu_access
from raiworker.gpu.access import BIN_DIR, LIB_DIR, GpuAccess, detect, driver_files


def fake_driver(tmp_path):
    lib = tmp_path / "nvidia" / "lib64"
    lib.mkdir(parents=True)
    (lib / "libcuda.so.580.65.06").write_bytes(b"elf")
    (lib / "libcuda.so.1").symlink_to("libcuda.so.580.65.06")
    (lib / "libnvidia-ml.so.1").write_bytes(b"elf")
    (lib / "libstdc++.so.6").write_bytes(b"not the driver's")
    bin_ = tmp_path / "nvidia" / "bin"
    bin_.mkdir()
    (bin_ / "nvidia-smi").write_bytes(b"elf")
    return lib, bin_


def test_the_driver_files_named_by_folder_go_under_usr_local_nvidia(tmp_path):
    lib, bin_ = fake_driver(tmp_path)
    files = {inside: host for host, inside in driver_files([str(lib), str(bin_)])}
    assert files == {
        f"{LIB_DIR}/libcuda.so.1": str(lib / "libcuda.so.580.65.06"),
        f"{LIB_DIR}/libcuda.so.580.65.06": str(lib / "libcuda.so.580.65.06"),
        f"{LIB_DIR}/libnvidia-ml.so.1": str(lib / "libnvidia-ml.so.1"),
        f"{BIN_DIR}/nvidia-smi": str(bin_ / "nvidia-smi"),
    }  # libstdc++ is not the driver's


def test_a_container_gets_exactly_its_gpus_nodes_and_read_only_driver_files(tmp_path, monkeypatch):
    lib, bin_ = fake_driver(tmp_path)
    monkeypatch.setattr(gpu_access.os.path, "exists", lambda p: p in ("/dev/nvidiactl", "/dev/nvidia-uvm") or not p.startswith("/dev/"))
    monkeypatch.setattr(gpu_access, "gpu_minors", lambda indexes: {"0": 0, "1": 3})
    access = detect("auto", [str(lib), str(bin_)], {"runc": {}}, [0, 1])
    assert access.mode == "devices" and "no NVIDIA container runtime" in access.why
    opts = access.container_options(["1"], ["PATH=/opt/cuda/bin:/usr/bin", "LD_LIBRARY_PATH=/opt/cuda/lib64"])
    assert opts["devices"] == [
        "/dev/nvidiactl:/dev/nvidiactl:rwm",
        "/dev/nvidia-uvm:/dev/nvidia-uvm:rwm",
        "/dev/nvidia3:/dev/nvidia3:rwm",
    ]  # GPU 1 is /dev/nvidia3 here; never GPU 0's node
    assert all(m["ReadOnly"] for m in opts["mounts"]) and {m["Target"] for m in opts["mounts"]} >= {f"{LIB_DIR}/libcuda.so.1"}
    assert opts["environment"] == {"LD_LIBRARY_PATH": f"{LIB_DIR}:/opt/cuda/lib64", "PATH": f"/opt/cuda/bin:/usr/bin:{BIN_DIR}"}
    assert access.container_options([], []) == {}  # no GPU granted: no node at all


def test_the_runtime_is_used_where_the_engine_has_it_and_nothing_runs_gpu_less_by_accident(tmp_path):
    runtime = detect("auto", [], {"nvidia": {"path": "nvidia-container-runtime"}}, [0])
    assert runtime.mode == "runtime" and "device_requests" in runtime.container_options(["0"], [])
    nothing = detect("devices", [str(tmp_path)], {}, [0])
    assert nothing.mode == "none"
    import pytest

    from raiworker.errors import ExecutorUnavailable

    with pytest.raises(ExecutorUnavailable, match="cannot give a container its GPU"):
        nothing.container_options(["0"], [])
    assert GpuAccess("none", "x").container_options([], []) == {}
