"""Issue 37: getting the client. The server offers it as one file, GET /client/raiclient.pyz, that
runs on a Python with nothing installed, and as wheels listed at GET /client/ for pip. Downloaded
from the real service and run against it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from helpers import make_project
from pydantic import TypeAdapter

from raiprotocol.models import JobOut

pytestmark = pytest.mark.timeout(240)
BARE = shutil.which("python3", path="/usr/bin:/bin") or "python3"  # the system's Python, not the test venv's


def bare(svc, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``python3 raiclient.pyz ARGS`` with no site-packages at all (-I -S): only what the file holds."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd), "RAI_PROFILE": str(svc.profile), "PYTHONUNBUFFERED": "1"}
    return subprocess.run([BARE, "-I", "-S", "raiclient.pyz", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_the_one_file_client_submits_and_lists_on_a_bare_python(process_service, tmp_path):
    svc = process_service
    with httpx.Client(base_url=svc.url, timeout=30) as h:  # no credentials needed
        page = h.get("/client/")
        assert page.status_code == 200 and 'href="raiclient.pyz"' in page.text, page.text
        assert re.search(r'href="raiclient-[\d.]+-py3-none-any\.whl"', page.text) and "raiprotocol-" in page.text
        (tmp_path / "raiclient.pyz").write_bytes(h.get("/client/raiclient.pyz").content)
        assert h.get("/client/nothing.whl").status_code == 404
        login = h.get("/login").text  # where a student looks first
        assert f"curl -O {svc.url}/client/raiclient.pyz &amp;&amp; python3 raiclient.pyz submit" in login, login
    probe = subprocess.run([BARE, "-I", "-S", "-c", "import pydantic"], capture_output=True, timeout=60)
    assert probe.returncode != 0  # the Python really is bare
    proj = make_project(tmp_path / "proj", ["echo from the pyz", "echo Op Time: 0.5"])
    res = bare(svc, "submit", "-p", str(proj), cwd=tmp_path)
    assert res.returncode == 0 and "from the pyz" in res.stdout and "✱ Job succeeded" in res.stdout, res.stdout + res.stderr
    job_id = re.search(r"Job (\S+) queued", res.stdout).group(1)
    res = bare(svc, "history", "--json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert TypeAdapter(list[JobOut]).validate_json(res.stdout)[0].id == job_id
    res = bare(svc, "status", job_id, "--json", cwd=tmp_path)
    assert res.returncode == 0 and JobOut.model_validate_json(res.stdout).results.op_time_total == 0.5
    assert bare(svc, "version", cwd=tmp_path).stdout.startswith("raiclient ")
    res = bare(svc, "logs", cwd=tmp_path)  # your last job's log
    assert res.returncode == 0 and "from the pyz" in res.stdout and "✱ Job succeeded" in res.stdout, res.stdout + res.stderr
    res = bare(svc, "cancel", job_id, cwd=tmp_path)  # needs the full client: said, with how to get it
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert "needs the full client" in res.stderr and f"pip install --find-links {svc.url}/client/ raiclient" in res.stderr


def test_the_wheels_install_with_pip_from_the_listing(process_service, tmp_path):
    svc = process_service
    target = tmp_path / "site"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            "--target",
            str(target),
            "--find-links",
            f"{svc.url}/client/",
            "raiclient",
            "raiprotocol",
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert (target / "raiclient" / "cli.py").exists() and (target / "raiprotocol" / "models.py").exists()
    assert "raiclient = raiclient.entry:main" in next(target.glob("raiclient-*.dist-info")).joinpath("entry_points.txt").read_text()
    env = {**os.environ, "PYTHONPATH": str(target), "RAI_PROFILE": str(svc.profile), "RAI_SERVER": svc.url}
    code = "import raiclient, sys; print(raiclient.__file__); sys.argv = ['raiclient', 'queue']; from raiclient.entry import main; main()"
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stdout.startswith(str(target)) and "gpu" in res.stdout, res.stdout + res.stderr
