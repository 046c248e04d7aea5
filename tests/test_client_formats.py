"""Issue 37: what the client prints, for scripts and for people. ``--json`` prints the protocol's
models and nothing else; colour follows ``--color`` and NO_COLOR, and a log written to a file or a
pipe has none; narrow terminals lose columns, never part of a value; times are the reader's local
ones; ``logs`` alone is your last job; shell completion works. The real client against the real
service (Docker executor, a ranked run on the board)."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from datetime import timedelta, timezone
from pathlib import Path

import pytest
from helpers import make_project
from helpers.ranked import HONEST_SH, install_course
from pydantic import TypeAdapter

from raiprotocol.models import AuditRow, CourseBuildOut, Entry, JobOut, QueueImages, QueueSummary, VersionOut

pytestmark = pytest.mark.timeout(300)

RED = "printf '\\033[31mred words\\033[0m\\n'"


def job_id(output: str) -> str:
    found = re.search(r"Job (\S+) queued", output)
    assert found, output
    return found.group(1)


@pytest.fixture(scope="module")
def svc(docker_service, docker_engine, tmp_path_factory):
    """The service with a course build installed, one ranked run on the board (of a team with a
    long name) and two jobs of 'rosa', the second printing in red."""
    tmp = tmp_path_factory.mktemp("formats")
    install_course(docker_service, docker_engine, tmp)
    team = docker_service.add_user("ranker", team="team-with-long-name")
    proj = make_project(tmp / "final", ["true"], files={"solution.sh": HONEST_SH, "report.pdf": "%PDF-1.4"})
    res = docker_service.client("submit", "-p", str(proj), "--kind", "final", env={"RAI_PROFILE": str(team)}, timeout=180)
    assert res.returncode == 0, res.stdout + res.stderr
    rosa = docker_service.add_user("rosa")
    docker_service.rosa = rosa
    docker_service.rosa_jobs = []
    for i, command in enumerate(["echo first job", RED]):
        res = docker_service.client("submit", "-p", str(make_project(tmp / f"p{i}", [command])), env={"RAI_PROFILE": str(rosa)})
        assert res.returncode == 0, res.stdout + res.stderr
        docker_service.rosa_jobs.append(job_id(res.stdout))
    return docker_service


def as_rosa(svc, *args: str, **env: str) -> subprocess.CompletedProcess:
    return svc.client(*args, env={"RAI_PROFILE": str(svc.rosa), **env})


def in_terminal(svc, *args: str, **env: str) -> str:
    """What the client writes to a terminal (a pseudo-terminal as its stdout and stderr)."""
    e = {**os.environ, "RAI_PROFILE": str(svc.rosa), "RAI_SERVER": svc.url, "TERM": "xterm-256color", **env}
    if "NO_COLOR" not in env:
        e.pop("NO_COLOR", None)
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "raiclient", *args], stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=e)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the client ended and closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    proc.wait(60)
    return b"".join(chunks).decode()


def test_json_prints_each_listing_as_its_model_and_nothing_else(svc):
    admin = {
        "history": list[JobOut],
        "queue": list[QueueSummary],
        "images": list[QueueImages],
        "ranking": list[Entry],
        "version": VersionOut,
        "admin audit": list[AuditRow],
        "admin course show": list[CourseBuildOut],
    }
    seen = {}
    for command, model in admin.items():
        res = svc.client(*command.split(), "--json")
        assert res.returncode == 0, res.stdout + res.stderr
        seen[command] = TypeAdapter(model).validate_json(res.stdout)  # anything else on stdout fails here
    assert seen["version"].server == svc.url and seen["version"].server_version
    assert seen["ranking"] and seen["ranking"][0].name == "team-with-long-name"
    assert [c.kind for c in seen["admin course show"]] == ["final"]
    assert any(r.action.startswith("course") for r in seen["admin audit"]), seen["admin audit"]
    assert [q.queue for q in seen["images"]] == ["gpu"] and seen["images"][0].images
    mine = TypeAdapter(list[JobOut]).validate_json(as_rosa(svc, "history", "--json").stdout)
    assert [j.id for j in mine] == svc.rosa_jobs[::-1]
    res = as_rosa(svc, "status", svc.rosa_jobs[0], "--json")
    assert res.returncode == 0 and JobOut.model_validate_json(res.stdout).id == svc.rosa_jobs[0]


def test_status_of_a_failed_job_as_json_keeps_the_jobs_exit_status(svc, tmp_path):
    other = {"RAI_PROFILE": str(svc.add_user("failer"))}
    failed = job_id(svc.client("submit", "-p", str(make_project(tmp_path / "f", ["exit 3"])), env=other).stdout)
    res = svc.client("status", failed, "--json", env=other)
    assert res.returncode == 3 and JobOut.model_validate_json(res.stdout).state.value == "failed", res.stdout


def test_a_log_into_a_file_or_a_pipe_has_no_colour_codes_unless_asked(svc, tmp_path):
    red = svc.rosa_jobs[1]
    piped = as_rosa(svc, "logs", red)
    assert "red words" in piped.stdout and "\x1b" not in piped.stdout + piped.stderr, repr(piped.stdout)
    with open(tmp_path / "log.txt", "w") as fh:
        subprocess.run(
            [sys.executable, "-m", "raiclient", "logs", red],
            stdout=fh,
            check=True,
            timeout=60,
            env={**os.environ, "RAI_PROFILE": str(svc.rosa), "RAI_SERVER": svc.url},
        )
    assert "red words" in (tmp_path / "log.txt").read_text() and "\x1b" not in (tmp_path / "log.txt").read_text()
    asked = as_rosa(svc, "logs", red, "--color", "always")
    assert "\x1b[31mred words\x1b[0m" in asked.stdout, repr(asked.stdout)
    assert "\x1b[31mred words" in as_rosa(svc, "--color=always", "logs", red, NO_COLOR="1").stdout  # the flag wins
    bad = as_rosa(svc, "logs", red, "--color", "sometimes")
    assert bad.returncode == 2 and "--color takes auto, always, never" in bad.stderr, bad.stderr


def test_a_terminal_gets_colour_unless_no_color_or_never(svc):
    red = svc.rosa_jobs[1]
    assert "\x1b[31mred words" in in_terminal(svc, "logs", red)
    for plain in (
        in_terminal(svc, "logs", red, NO_COLOR="1"),
        in_terminal(svc, "logs", red, "--color", "never"),
        in_terminal(svc, "history", NO_COLOR="1"),
        in_terminal(svc, "--color", "never", "status", red),
    ):
        assert "red words" in plain or "succeeded" in plain, plain
        assert "\x1b[" not in plain, repr(plain)
    assert "\x1b[1m" in in_terminal(svc, "history")  # the header is bold on a terminal


def test_at_60_columns_no_id_or_op_time_is_cut(svc):
    res = as_rosa(svc, "history", COLUMNS="60")
    lines = res.stdout.splitlines()
    assert all(jid in res.stdout for jid in svc.rosa_jobs), res.stdout
    assert max(map(len, lines)) <= 60 and "…" not in res.stdout, res.stdout
    board = TypeAdapter(list[Entry]).validate_json(svc.client("ranking", "--json").stdout)
    res = svc.client("ranking", env={"COLUMNS": "60"})
    assert f"{board[0].op_time:.6f}" in res.stdout and "team-with-long-name" in res.stdout, res.stdout
    assert max(map(len, res.stdout.splitlines())) <= 60 and "…" not in res.stdout, res.stdout
    wide = svc.client("ranking", env={"COLUMNS": "160"}).stdout
    assert "gpu" in wide and "verified" in wide and "verified" not in res.stdout  # dropped only when narrow


def test_status_shows_readable_local_times(svc):
    job = JobOut.model_validate_json(as_rosa(svc, "status", svc.rosa_jobs[0], "--json").stdout)
    res = as_rosa(svc, "status", svc.rosa_jobs[0], TZ="Asia/Kolkata")
    india = job.created_at.astimezone(timezone(timedelta(hours=5, minutes=30)))
    assert re.search(rf"created +{india:%Y-%m-%d %H:%M:%S} IST *\n", res.stdout), res.stdout
    assert "+00:00" not in res.stdout and not re.search(r"\d\d:\d\d:\d\d\.\d", res.stdout), res.stdout
    assert f"{india:%m-%d %H:%M}" in as_rosa(svc, "history", TZ="Asia/Kolkata").stdout


def test_logs_without_an_id_is_your_last_job(svc, tmp_path):
    res = as_rosa(svc, "logs")
    assert res.returncode == 0 and "red words" in res.stdout and "first job" not in res.stdout, res.stdout + res.stderr
    nobody = svc.add_user("newcomer")
    res = svc.client("logs", env={"RAI_PROFILE": str(nobody)})
    assert res.returncode == 2 and "you have no job yet" in res.stderr, res.stderr


def test_shell_completion_script_and_answers(tmp_path):
    raiclient = str(Path(sys.executable).with_name("raiclient"))
    script = subprocess.run([raiclient, "--show-completion", "bash"], capture_output=True, text=True, timeout=60)
    assert script.returncode == 0 and "_RAICLIENT_COMPLETE=complete_bash" in script.stdout, script.stdout + script.stderr
    env = {**os.environ, "_RAICLIENT_COMPLETE": "complete_bash", "COMP_WORDS": "raiclient hi", "COMP_CWORD": "1"}
    assert subprocess.run([raiclient], env=env, capture_output=True, text=True, timeout=60).stdout.split() == ["history"]
    env.update(COMP_WORDS="raiclient history --js", COMP_CWORD="2")
    assert subprocess.run([raiclient], env=env, capture_output=True, text=True, timeout=60).stdout.split() == ["--json"]
    # the whole path a student takes: bash sources the script and completes a word
    probe = f'{script.stdout}\nCOMP_WORDS=(raiclient sta); COMP_CWORD=1; _raiclient_completion raiclient; echo "${{COMPREPLY[@]}}"'
    res = subprocess.run(
        ["bash", "-c", probe],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PATH": f"{Path(raiclient).parent}:{os.environ['PATH']}"},
    )
    assert res.stdout.split() == ["status"], res.stdout + res.stderr
