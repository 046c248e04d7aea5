"""GPU shares (issue 38): up to RAI_JOBS_PER_GPU jobs on one GPU, the least used GPU first, and a
job of a queue that allows one job per GPU (or a ranked run) has its GPU alone."""

from __future__ import annotations

import threading
import time
from contextlib import ExitStack

import pytest

from raiprotocol.models import GpuInfo
from raiworker.config import WorkerSettings
from raiworker.errors import NoGpu
from raiworker.gpu.holds import ShareWatch, hold_gpus, occupancy, profiler_lock, profiler_turn

GPUS = [GpuInfo(index=0), GpuInfo(index=1)]


def test_four_jobs_share_each_gpu_and_a_ninth_waits(tmp_path):
    with ExitStack() as held:
        got = [held.enter_context(hold_gpus(tmp_path, GPUS, 1, per_gpu=4, share=4)) for _ in range(8)]
        assert sorted(g[0] for g in got) == ["0"] * 4 + ["1"] * 4
        assert got[0] != got[1]  # the least used GPU first: the first two jobs are spread
        assert occupancy(tmp_path, GPUS, 4) == {0: 4, 1: 4}
        with pytest.raises(NoGpu), hold_gpus(tmp_path, GPUS, 1, wait=0.3, per_gpu=4, share=4):
            pass
    assert occupancy(tmp_path, GPUS, 4) == {0: 0, 1: 0}


def test_a_job_that_may_not_share_waits_for_a_gpu_with_no_job(tmp_path):
    with hold_gpus(tmp_path, GPUS, 1, per_gpu=4, share=4) as first, hold_gpus(tmp_path, GPUS, 1, per_gpu=4, share=1) as alone:
        assert alone != first  # the idle GPU, all of it
        assert occupancy(tmp_path, GPUS, 4)[int(alone[0])] == 4
        with pytest.raises(NoGpu), hold_gpus(tmp_path, GPUS, 1, wait=0.3, per_gpu=4, share=1):
            pass  # no GPU is free of jobs now
        with pytest.raises(NoGpu), hold_gpus(tmp_path, [GPUS[int(alone[0])]], 1, wait=0.3, per_gpu=4, share=4):
            pass  # nor does anything join the one it holds


def test_one_job_per_gpu_is_what_it_always_was(tmp_path):
    with hold_gpus(tmp_path, GPUS, 2) as both:
        assert sorted(both) == ["0", "1"]
        assert (tmp_path / "gpu0.lock").exists()  # the lock file a GPU always had
        with pytest.raises(NoGpu), hold_gpus(tmp_path, GPUS, 1, wait=0.3):
            pass


def test_the_watch_counts_the_jobs_beside_a_run(tmp_path):
    with hold_gpus(tmp_path, GPUS[:1], 1, per_gpu=4, share=4) as mine, ShareWatch(tmp_path, GPUS, mine, 4, 1) as watch:
        assert watch.most == 0
        with hold_gpus(tmp_path, GPUS[:1], 1, per_gpu=4, share=4), hold_gpus(tmp_path, GPUS[:1], 1, per_gpu=4, share=4):
            assert watch.others() == 2
            time.sleep(1.5)  # a sample while they run
    assert watch.most == 2 and watch.others() == 0  # they left; the most stays


def test_jobs_per_gpu_is_read_per_queue(tmp_path, monkeypatch):
    monkeypatch.setenv("RAI_JOBS_PER_GPU", "gpu=4,final=1")
    s = WorkerSettings(queues=["gpu", "final"], work_dir=tmp_path, worker_name="w")
    assert (s.per_gpu, s.share_for("gpu"), s.share_for("final"), s.share_for("other")) == (4, 4, 1, 1)
    monkeypatch.setenv("RAI_JOBS_PER_GPU", "8")
    assert WorkerSettings(work_dir=tmp_path, worker_name="w").share_for("any") == 8
    monkeypatch.setenv("RAI_JOBS_PER_GPU", "gpu=99")
    with pytest.raises(ValueError, match="from 1 to 16"):
        WorkerSettings(work_dir=tmp_path, worker_name="w")


def test_the_profiler_turn_knows_while_another_job_waits_for_it(tmp_path):
    """What the turn limit (RAI_PROFILER_TURN_SECONDS) stands on: the holder sees a waiter while it
    waits and not before or after; the waiter gets the turn once the holder lets it go."""
    path = profiler_lock(tmp_path, "0")
    told, got, done = threading.Event(), threading.Event(), threading.Event()

    def waiter() -> None:
        with profiler_turn(path, done.is_set, told.set) as turn:
            assert turn is not None and not turn.others_waiting()
            got.set()

    with profiler_turn(path, lambda: False, lambda: None) as mine:
        assert mine is not None and not mine.others_waiting()
        thread = threading.Thread(target=waiter)
        thread.start()
        assert told.wait(5)
        deadline = time.monotonic() + 5
        while not mine.others_waiting():
            assert time.monotonic() < deadline, "the holder never saw the waiter"
            time.sleep(0.05)
        assert not got.is_set()
    assert got.wait(5)
    thread.join(5)
    with profiler_turn(path, lambda: False, lambda: None) as again:
        assert again is not None and not again.others_waiting()  # the waiter left no mark
    again.close()
    assert not again.others_waiting()  # a closed turn is never asked of a descriptor it no longer owns
