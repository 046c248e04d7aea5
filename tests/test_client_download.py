"""Issues 37 and 49: getting the client. The server offers it as one file, GET /client/raiclient.pyz,
that runs every student command on a Python with nothing installed, and as wheels listed at GET
/client/ for pipx or a venv (the full client: the admin commands). Downloaded from the real
service and run against it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import httpx
import pytest
from helpers import make_project
from pydantic import TypeAdapter

from raiprotocol.models import JobOut
from raiprotocol.profile import read_profile_file

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
        # issue 49: the page names this server, ready to copy (not "SERVER/…"), and pipx or a venv, not a bare pip
        assert "SERVER" not in page.text and f"curl -O {svc.url}/client/raiclient.pyz" in page.text, page.text
        assert f"pipx install --pip-args='--find-links {svc.url}/client/' raiclient" in page.text, page.text
        assert f"~/.venvs/raiclient/bin/pip install --find-links {svc.url}/client/ raiclient" in page.text, page.text
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
    # the admin commands need the full client: said, with exactly how to install it (pipx, or a venv)
    res = bare(svc, "admin", "kinds", "show", cwd=tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert "'raiclient admin kinds show' needs the full client (pydantic is not installed here)" in res.stderr, res.stderr
    assert f"pipx install --pip-args='--find-links {svc.url}/client/' raiclient" in res.stderr, res.stderr
    assert "python3 -m venv ~/.venvs/raiclient" in res.stderr and f"pip install --find-links {svc.url}/client/ raiclient" in res.stderr


def _student(svc, name: str, tmp_path: Path):
    """A student's profile, and ``python3 -I -S raiclient.pyz ARGS`` as that student."""
    with httpx.Client(base_url=svc.url, timeout=30) as h:
        (tmp_path / "raiclient.pyz").write_bytes(h.get("/client/raiclient.pyz").content)
    profile = svc.add_user(name)

    def run(*args: str, extra: dict | None = None) -> subprocess.CompletedProcess:
        env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "RAI_PROFILE": str(profile), "PYTHONUNBUFFERED": "1", **(extra or {})}
        return subprocess.run(
            [BARE, "-I", "-S", "raiclient.pyz", *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )

    return profile, run


def test_the_one_file_client_runs_every_student_command(process_service, tmp_path):
    """Issue 49: raiclient.pyz on the system's Python with no site-packages (-I -S) does all a
    student does: submit, logs, status, history, queue, images, ranking, kinds, limits, download,
    cancel, delete, regrade, regrades, login and completion; before, everything past submit, logs
    and --json said 'needs the full client'."""
    svc = process_service
    assert svc.client("admin", "kinds", "set", "m49", "--grade", "pass").returncode == 0  # a graded kind: its runs may be regraded
    profile, pyz = _student(svc, "pyz_student", tmp_path)
    proj = make_project(tmp_path / "proj", ["echo made > /build/made.txt", "echo Op Time: 0.25"])
    res = pyz("submit", "-p", str(proj), "--kind", "m49")
    assert res.returncode == 0 and "✱ Job succeeded" in res.stdout, res.stdout + res.stderr
    job_id = re.search(r"Job (\S+) queued", res.stdout).group(1)

    res = pyz("status")  # your last job, as logs
    assert res.returncode == 0 and re.search(rf"^id +{job_id}$", res.stdout, re.M) and re.search(r"^state +succeeded$", res.stdout, re.M)
    assert "Op Time  0.25 s" in res.stdout, res.stdout
    res = pyz("history")
    assert res.returncode == 0 and re.search(rf"^{job_id} +succeeded +m49 ", res.stdout, re.M), res.stdout
    res = pyz("queue")
    assert res.returncode == 0 and "│ queue" in res.stdout, res.stdout + res.stderr
    assert pyz("images").returncode == 0
    res = pyz("ranking")
    assert res.returncode == 0 and "No run ranks yet" in res.stdout, res.stdout + res.stderr
    res = pyz("kinds")
    assert res.returncode == 0 and re.search(r"^m49 ", res.stdout, re.M) and "Jobs waiting or running:" in res.stdout, res.stdout
    res = pyz("limits")
    assert res.returncode == 0 and res.stdout.startswith("Jobs waiting or running: "), res.stdout + res.stderr

    res = pyz("download", job_id, "-o", "b.tgz")
    assert res.returncode == 0 and "Saved b.tgz" in res.stdout, res.stdout + res.stderr
    assert "to unpack it: mkdir b && tar -xzf b.tgz -C b" in res.stdout, res.stdout  # its files have no top folder
    with tarfile.open(tmp_path / "b.tgz") as tar:
        assert tar.extractfile("made.txt").read() == b"made\n"

    res = pyz("regrade", job_id, "the op time looks noisy")
    assert res.returncode == 0 and re.search(rf"Regrade request #\d+ for job {job_id} sent", res.stdout), res.stdout + res.stderr
    res = pyz("regrades")
    assert res.returncode == 0 and f"job {job_id} ('m49')" in res.stdout and "message: the op time looks noisy" in res.stdout

    slow = make_project(tmp_path / "slow", ["sleep 60"])
    res = pyz("submit", "-d", "-p", str(slow))
    assert res.returncode == 0, res.stdout + res.stderr
    waiting = re.search(r"Job (\S+) queued", res.stdout).group(1)
    res = pyz("cancel", waiting)
    assert res.returncode == 0 and re.search(rf"Job {waiting}: (cancelled|\w+ \(stopping\))", res.stdout), res.stdout + res.stderr
    res = pyz("delete", job_id)
    assert res.returncode == 0 and f"Job {job_id}: freed" in res.stdout, res.stdout + res.stderr

    keys = read_profile_file(profile)
    fresh = tmp_path / "fresh.rai_profile"
    args = ("login", "--server", svc.url, "--access-key", keys.access_key, "--secret-key", keys.secret_key)
    res = pyz(*args, extra={"RAI_PROFILE": str(fresh)})
    assert res.returncode == 0 and f"Logged in as pyz_student (student); profile written to {fresh}" in res.stdout, res.stdout + res.stderr
    assert read_profile_file(fresh).access_key == keys.access_key

    res = pyz("completion", "bash")
    assert res.returncode == 0 and "_RAICLIENT_COMPLETE=complete_bash" in res.stdout and "raiclient.pyz" in res.stdout, res.stdout
    ask = {"_RAICLIENT_COMPLETE": "complete_bash"}
    res = pyz(extra={**ask, "COMP_WORDS": "raiclient submit --kind ", "COMP_CWORD": "3"})
    assert "m49" in res.stdout.split(), res.stdout + res.stderr
    res = pyz(extra={**ask, "COMP_WORDS": "raiclient status ", "COMP_CWORD": "2"})
    assert job_id in res.stdout.split() and waiting in res.stdout.split(), res.stdout + res.stderr


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
    assert (target / "raiclient" / "commands.py").exists() and (target / "raiprotocol" / "models.py").exists()
    assert "raiclient = raiclient.entry:main" in next(target.glob("raiclient-*.dist-info")).joinpath("entry_points.txt").read_text()
    env = {**os.environ, "PYTHONPATH": str(target), "RAI_PROFILE": str(svc.profile), "RAI_SERVER": svc.url}
    code = "import raiclient, sys; print(raiclient.__file__); sys.argv = ['raiclient', 'queue']; from raiclient.entry import main; main()"
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stdout.startswith(str(target)) and "gpu" in res.stdout, res.stdout + res.stderr
