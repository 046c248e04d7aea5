"""Issue 32: what NVML says of a timed run, as the worker reads it. The profiler's export names the
processes it saw (the H100 fixture: m2, pid 2450 in its container); a process of the job that used
the GPU and is not among them did work the ranked number misses. Throttle reasons that slow a run
down are told apart from those that do not (idle, say)."""

from __future__ import annotations

from pathlib import Path

from raiworker.gpu.nvml import profiled_pids, slowdowns, unprofiled

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "ncu-h100-m2-baseline.csv"


def test_the_profilers_report_names_the_processes_it_saw():
    report = FIXTURE.read_text()
    assert profiled_pids(report) == {2450}
    assert profiled_pids("no table at all") == set()
    assert profiled_pids('"ID","Process ID"\n"",""\n"0","12x"\n') == set()  # a forged pid is not a pid


def test_a_gpu_user_missing_from_the_report_is_hidden_work():
    report = FIXTURE.read_text()
    assert unprofiled({2450: 30}, profiled_pids(report)) == []  # the honest run: m2 alone
    assert unprofiled({2450: 30, 2511: 4}, profiled_pids(report)) == [2511]  # a helper started with a clean environment


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
