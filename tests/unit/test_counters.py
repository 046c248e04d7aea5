"""Whether jobs may read the GPU's profiling counters, from the driver's own parameters file
(its format as /proc/driver/nvidia/params writes it)."""

from __future__ import annotations

from pathlib import Path

from raiworker.gpu import counters

PARAMS = "ResmanDebugLevel: 4294967295\nRmLogonRC: 1\nModifyDeviceFiles: 1\nRmProfilingAdminOnly: {}\nOpenRmEnableUnsupportedGpus: 1\n"


def test_restricted_counters_are_named_with_the_fix(tmp_path: Path):
    (tmp_path / "params").write_text(PARAMS.format(1))
    assert counters.restricted(tmp_path / "params") is True
    line = counters.startup_line(tmp_path / "params")
    assert line and "restricted to administrators" in line and "NVreg_RestrictProfilingToAdminUsers=0" in line


def test_open_counters(tmp_path: Path):
    (tmp_path / "params").write_text(PARAMS.format(0))
    assert counters.restricted(tmp_path / "params") is False
    assert counters.startup_line(tmp_path / "params") == "GPU profiling counters: open to jobs (RmProfilingAdminOnly: 0)"


def test_no_driver_says_nothing(tmp_path: Path):
    assert counters.restricted(tmp_path / "absent") is None and counters.startup_line(tmp_path / "absent") is None
    (tmp_path / "params").write_text("RmLogonRC: 1\n")
    assert counters.restricted(tmp_path / "params") is None
