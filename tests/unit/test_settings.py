"""Settings are parsed once, typed, and shared by name between server and worker."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pydantic import ValidationError

from raiserver.config import Settings
from raiworker.config import WorkerSettings


def test_lists_and_maps_are_typed(monkeypatch):
    monkeypatch.setenv("RAI_PRIORITY_KINDS", " final, m3 ,")
    monkeypatch.setenv("RAI_ALLOWED_IMAGES", "rai/base:1; gpu=rai/cuda:12 rai/cuda:13; cpu=rai/cpu:1")
    monkeypatch.setenv("RAI_QUEUES", "gpu,cpu")
    monkeypatch.setenv("RAI_JOB_ENV", "DATA=/data, MODE=fast")
    s, w = Settings(), WorkerSettings()
    assert s.priority_kinds == ["final", "m3"]
    assert s.images_allowed_on("gpu") == ["rai/base:1", "rai/cuda:12", "rai/cuda:13"]
    assert s.images_allowed_on("other") == ["rai/base:1"]
    assert Settings(allowed_images="").images_allowed_on("gpu") is None
    assert w.queues == ["gpu", "cpu"] and w.job_env == {"DATA": "/data", "MODE": "fast"}


def test_one_name_for_the_caps_both_sides_read(monkeypatch):
    monkeypatch.setenv("RAI_WALL_SECONDS", "900")
    monkeypatch.setenv("RAI_MEMORY_MB", "2048")
    assert (Settings().wall_seconds, Settings().memory_mb) == (900, 2048)
    assert (WorkerSettings().wall_seconds, WorkerSettings().memory_mb) == (900, 2048)


def test_a_renamed_variable_stops_the_start_with_its_new_name(monkeypatch):
    monkeypatch.setenv("RAI_JOB_WALL_SECONDS", "60")
    with pytest.raises(ValidationError, match="RAI_JOB_WALL_SECONDS is now RAI_WALL_SECONDS"):
        Settings()
    with pytest.raises(ValidationError, match="RAI_WALL_SECONDS"):
        WorkerSettings()


def test_importing_the_worker_does_no_work(tmp_path):
    """No nvidia-smi, no settings read, no broker at import: a `nvidia-smi` that fails loudly on
    the PATH is never run."""
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho ran > " + str(tmp_path / "ran") + "\n")
    fake.chmod(0o755)
    code = "import raiworker.celery_app, raiworker.run.entry; print('ok')"
    res = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": f"{tmp_path}:/usr/bin:/bin", "RAI_GPUS": "auto"},
    )
    assert res.stdout.strip() == "ok", res.stderr
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize(
    "env,said",
    [
        ({"RAI_PROFILER_TURN_SECONDS": "0"}, "RAI_PROFILER_TURN_SECONDS: Input should be greater than 0 (it is '0')"),
        ({"RAI_SLOTS": "many"}, "RAI_SLOTS: Input should be a valid integer, unable to parse string as an integer (it is 'many')"),
        ({"RAI_JOBS_PER_GPU": "17"}, "RAI_JOBS_PER_GPU for '*' is 17: from 1 to 16"),
        ({"RAI_JOB_WALL_SECONDS": "60"}, "RAI_JOB_WALL_SECONDS is now RAI_WALL_SECONDS"),
        ({"RAI_EXECUTOR": "dokcer"}, "unknown executor 'dokcer' (RAI_EXECUTOR); one of: docker, process, slurm"),
    ],
)
def test_a_bad_setting_stops_the_worker_named_as_the_operator_wrote_it(tmp_path, env, said):
    res = subprocess.run(
        [sys.executable, "-m", "raiworker.cli", "run"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "RAI_WORK_DIR": str(tmp_path / "w"), **env},
    )
    assert res.returncode == 2 and res.stderr.strip() == f"raiworker: bad settings: {said}", res.stderr
