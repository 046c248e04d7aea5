"""Issue 49's small client items, as a student meets them at the terminal: ``status`` alone is your
last job (as ``logs`` is), a job id too short to look up says so, the failure line quotes a
command that holds quotes so it reads right, a late submission is announced once, Ctrl-C's hint
fits an 80-column terminal, and completion offers kinds and job ids. The real client against the
real service (process executor)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from datetime import datetime, timedelta, timezone

import pytest
from helpers import make_project

pytestmark = pytest.mark.timeout(180)


def queued(output: str) -> str:
    found = re.search(r"Job (\w{26}) queued", output)
    assert found, output
    return found.group(1)


def as_new_student(svc, name: str):
    """The client run as a new student (each test its own: 5 submissions a minute each)."""
    profile = svc.add_user(name)

    def run(*args: str, **env: str) -> subprocess.CompletedProcess:
        return svc.client(*args, env={"RAI_PROFILE": str(profile), **env})

    run.profile = profile  # type: ignore[attr-defined]
    return run


@pytest.fixture(scope="module")
def student(process_service, tmp_path_factory):
    """A student with one finished job."""
    run = as_new_student(process_service, "transcript_student")
    res = run("submit", "-p", str(make_project(tmp_path_factory.mktemp("transcripts") / "first", ["echo first"])))
    assert res.returncode == 0, res.stdout + res.stderr
    run.first = queued(res.stdout)  # type: ignore[attr-defined]
    return run


def test_status_without_an_id_is_your_last_job_as_logs_is(student):
    res = student("status")
    assert res.returncode == 0 and re.search(rf"^id +{student.first}$", res.stdout, re.M), res.stdout + res.stderr
    assert re.search(r"^state +succeeded$", res.stdout, re.M), res.stdout


def test_a_job_id_too_short_to_look_up_says_so(student):
    res = student("status", student.first[:5])
    assert res.returncode == 2, res.stdout + res.stderr
    assert f"{student.first[:5]} is too short for a job id: give at least 6 characters of it" in res.stderr, res.stderr
    assert f"no job {student.first[:5]}" not in res.stderr
    res = student("status", student.first[:8].lower())  # a unique start still names it
    assert res.returncode == 0 and student.first in res.stdout, res.stdout + res.stderr


def test_the_failure_line_quotes_a_command_with_quotes_so_it_reads_right(process_service, tmp_path):
    student = as_new_student(process_service, "transcript_quotes")
    res = student("submit", "-p", str(make_project(tmp_path / "p", ["sh -c 'echo boom; exit 3'"])))
    assert res.returncode == 3, res.stdout + res.stderr
    assert re.search(r"✱ Job failed in [\d.]+ s: \"sh -c 'echo boom; exit 3'\" exited with 3\n", res.stdout), res.stdout
    res = student("submit", "-p", str(make_project(tmp_path / "q", ["false"])))
    assert re.search(r"✱ Job failed in [\d.]+ s: 'false' exited with 1\n", res.stdout), res.stdout


def test_a_late_submission_is_announced_once(process_service, tmp_path):
    student = as_new_student(process_service, "transcript_late")
    due = (datetime.now(timezone.utc) - timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M+00:00")
    res = process_service.client("admin", "kinds", "set", "late49", "--due", due, "--late-policy", "mark")
    assert res.returncode == 0, res.stdout + res.stderr
    proj = make_project(tmp_path / "p", ["echo done"])
    res = student("submit", "-p", str(proj), "--kind", "late49")
    assert res.returncode == 0, res.stdout + res.stderr
    said = [line for line in res.stdout.splitlines() if "deadline" in line or "was due" in line]
    assert len(said) == 1 and "late" in said[0], res.stdout
    res = student("submit", "-d", "-p", str(proj), "--kind", "late49")  # not following: the client says it
    said = [line for line in res.stdout.splitlines() if "deadline" in line or "was due" in line]
    assert len(said) == 1 and "this submission is marked late" in said[0], res.stdout
    jid = queued(res.stdout)
    assert f"✱ Detached. Follow: raiclient logs {jid} --follow\n✱           Status: raiclient status {jid}\n" in res.stdout, res.stdout


def test_ctrl_c_says_how_to_reattach_and_cancel_in_short_lines(process_service, tmp_path):
    student = as_new_student(process_service, "transcript_ctrl_c")
    proj = make_project(tmp_path / "p", ["echo started", "sleep 30"])
    proc = process_service.popen_client("submit", "-p", str(proj), env={"RAI_PROFILE": str(student.profile)})
    lines = []
    while not any(line.strip() == "started" for line in lines):
        line = proc.stdout.readline()
        assert line or proc.poll() is None, "".join(lines) + proc.stderr.read()
        lines.append(line)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=20)
    jid = queued("".join(lines))
    assert proc.returncode == 130, out
    hint = out.splitlines()[-3:]
    assert hint[0] == "✱ Detached; the job goes on.", out
    assert re.fullmatch(rf"✱   Reattach: raiclient logs {jid} --follow --after \d+", hint[1]), out
    assert hint[2] == f"✱   Cancel:   raiclient cancel {jid}", out
    assert max(len(line) for line in hint) <= 80, hint
    assert student("cancel", jid).returncode == 0


def test_completion_offers_kinds_after_kind_and_job_ids(process_service, student):
    assert process_service.client("admin", "kinds", "set", "m1").returncode == 0
    ask = {"_RAICLIENT_COMPLETE": "complete_bash"}
    res = student(**ask, COMP_WORDS="raiclient submit --kind ", COMP_CWORD="3")
    assert "m1" in res.stdout.split() and not any("/" in c or c.endswith(".py") for c in res.stdout.split()), res.stdout + res.stderr
    res = student(**ask, COMP_WORDS="raiclient submit --kind m", COMP_CWORD="3")
    assert "m1" in res.stdout.split() and all(c.startswith("m") for c in res.stdout.split()), res.stdout
    res = student(**ask, COMP_WORDS=f"raiclient logs {student.first[:8]}", COMP_CWORD="2")
    offered = res.stdout.split()
    assert student.first in offered and all(c.startswith(student.first[:8]) for c in offered), res.stdout + res.stderr
    res = student(**ask, COMP_WORDS="raiclient cancel ", COMP_CWORD="2")
    assert student.first in res.stdout.split(), res.stdout
    res = student(**ask, COMP_WORDS="raiclient submit -p ", COMP_CWORD="3")
    assert res.stdout.split() == ["__files__"], res.stdout  # the shell lists files here, and only here


def test_a_big_upload_shows_its_progress_on_a_terminal_from_the_one_file(process_service, tmp_path):
    """The bar was rich's: raiclient.pyz (no rich) uploaded a big project in silence."""
    import pty
    import shutil

    import httpx

    svc = process_service
    profile = svc.add_user("transcript_bar")
    (tmp_path / "raiclient.pyz").write_bytes(httpx.get(f"{svc.url}/client/raiclient.pyz", timeout=60).content)
    proj = make_project(tmp_path / "big", ["true"], files={"data.txt": os.urandom(3 * 1024**2).hex()})
    bare = shutil.which("python3", path="/usr/bin:/bin") or "python3"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "RAI_PROFILE": str(profile), "TERM": "xterm", "NO_COLOR": "1"}
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [bare, "-I", "-S", str(tmp_path / "raiclient.pyz"), "submit", "-d", "-p", str(proj)], env=env, stdout=slave, stderr=slave
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=60) == 0, b"".join(chunks).decode()
    out = b"".join(chunks).decode()
    assert re.search(r"✱ Uploading \[#{24}\] ([\d.]+)/\1 MiB +[\d.]+ MB/s", out), ascii(out)  # the last redraw: all of it
    assert re.search(r"\r\x1b\[K✱ Uploaded [\d.,]+ (KiB|MiB) \([\d.]+ MB/s\)", out), ascii(out)
