"""Issue 32: what NVML says of a timed run, as the worker reads it: the GPU's state and the processes
using it around the run. Throttle reasons that slow a run down are told apart from those that do
not (idle, say)."""

from __future__ import annotations

from pathlib import Path

from raiworker.gpu.nvml import slowdowns

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "ncu-h100-m2-baseline.csv"


def test_the_gpu_is_looked_at_around_a_timed_run_never_during_it():
    """Before the run and after its freeze, never while it runs (an NVML call beside the operations
    was noise in them): the GPU's state, and the live processes outside the run's container that
    used it; one of the run's that has just ended (no longer in /proc) is nobody's."""
    import os
    import subprocess
    import time

    from raiworker.gpu.nvml import GpuWatch

    outside = subprocess.Popen(["sleep", "30"])
    gone = subprocess.Popen(["true"])
    gone.wait()

    class Driver:
        calls = 0

        def state(self, index: int) -> dict:
            return {"sm_mhz": 1980, "throttle": []}

        def compute_pids(self, index: int) -> list[int]:
            Driver.calls += 1
            return [os.getpid(), gone.pid] + ([outside.pid] if Driver.calls > 1 else [])

    try:
        watch = GpuWatch(Driver(), [0], lambda pid: pid == os.getpid()).start()  # type: ignore[arg-type]
        time.sleep(0.3)  # the run
        assert Driver.calls == 1  # nothing samples while the run runs
        watch.stop()
        assert Driver.calls == 2
    finally:
        outside.kill()
        outside.wait()
    assert watch.states == [{"sm_mhz": 1980, "throttle": []}, {"sm_mhz": 1980, "throttle": [], "others": 1}]


def test_only_slowdowns_count_as_throttling():
    assert slowdowns(0x1) == []  # GPU idle
    assert slowdowns(0x4 | 0x40) == ["software power cap", "hardware thermal slowdown"]


NVML_H100 = Path(__file__).resolve().parent.parent / "fixtures" / "nvml-h100.json"  # bench/nvml_record.py on the H100


def test_the_drivers_process_records_recorded_on_the_h100_name_the_cuda_process():
    import json

    from raiworker.gpu.nvml import parse_processes

    rec = json.loads(NVML_H100.read_text())
    busy, idle = rec["busy"], rec["idle"]
    assert parse_processes(bytes.fromhex(busy["raw_processes"])) == [busy["pid"]]  # the program holding the GPU
    assert parse_processes(bytes.fromhex(idle["raw_processes"])) == []
    assert parse_processes(bytes.fromhex(busy["raw_processes"])[:-1]) == []  # a cut record is no record
    # the masks the H100 reported: idle (0x1) and busy at full clocks (0) are no slowdown
    assert slowdowns(idle["throttle_mask"]) == [] and slowdowns(busy["throttle_mask"]) == []
    assert busy["state"]["sm_mhz"] > idle["state"]["sm_mhz"] and busy["state"]["throttle"] == []


def test_a_shared_run_over_its_gpu_memory_share_is_told_once(tmp_path):
    """Issue 38: the driver's records carry each process's device memory (the H100's m2 held 774 MiB);
    a shared run's processes are summed against its share, and only its own count."""
    import json

    from raiworker.gpu.nvml import MemoryShare, parse_memory

    busy = json.loads(NVML_H100.read_text())["busy"]
    assert parse_memory(bytes.fromhex(busy["raw_processes"])) == {busy["pid"]: 774 * 1024**2}

    class Driver:  # the GPU's processes now: the job's two and a neighbour's big one
        def __init__(self) -> None:
            self.now = {11: 300 * 1024**2, 12: 200 * 1024**2, 99: 9000 * 1024**2}

        def process_memory(self, index: int) -> dict[int, int]:
            return dict(self.now)

    driver, told = Driver(), []
    watch = MemoryShare(driver, 0, lambda pid: pid in (11, 12), 1024 * 1024**2, told.append)
    assert watch.sample() == 500 * 1024**2 and told == []  # the neighbour's memory is not the job's
    driver.now[12] = 900 * 1024**2
    watch.sample()
    watch.sample()
    assert told == [1200 * 1024**2] and watch.most == 1200 * 1024**2
