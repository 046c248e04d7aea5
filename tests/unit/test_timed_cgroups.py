"""A worker killed in the middle of a ranked job leaves the timed runs' cgroup parents behind (its
containers are reaped at the next start); the worker removes them as it tidies its host, but never one that is
still in use (a process below it, or a folder the engine keeps) or that another worker of the
host has just made for its run."""

from __future__ import annotations

import os
import time
from pathlib import Path

from raiworker.executors.docker.cgroup import reap_parents


def _parent(root: Path, name: str, age: float, in_use: bool = False) -> Path:
    run = root / f"rai-timed-{name}" / "0123abcd" / "run"  # the parent, its container's cgroup, the run's
    run.mkdir(parents=True)
    if in_use:  # a cgroup with a process cannot be removed: here, a folder that is not empty
        (run / "cgroup.procs").write_text("4242\n")
    then = time.time() - age
    for folder in (run, run.parent, run.parent.parent):
        os.utime(folder, (then, then))
    return run.parent.parent


def test_left_behind_parents_go_and_those_in_use_or_just_made_stay(tmp_path):
    unified, cpu = tmp_path / "unified", tmp_path / "cpu"
    left = _parent(unified, "left", age=3600)
    left_v1 = _parent(cpu, "left", age=3600)  # a hybrid host's v1 controller has the same name
    fresh = _parent(unified, "fresh", age=5)
    busy = _parent(unified, "busy", age=3600, in_use=True)
    living = _parent(unified, "living", age=3600)  # its run's cgroup empty, a process below the parent (v2 says so)
    (living / "cgroup.events").write_text("populated 1\nfrozen 0\n")
    other = unified / "system.slice"
    other.mkdir()
    assert reap_parents([unified, cpu]) == 2
    assert not left.exists() and not left_v1.exists()
    assert fresh.exists() and busy.exists() and other.exists()
    assert (living / "0123abcd" / "run").exists()  # nothing of a living parent is touched
    assert reap_parents([unified, cpu], max_age=0) == 1 and not fresh.exists() and busy.exists()
