"""Issue 23: a leaderboard no student can forge. A ranked kind runs the course's build file, not
the student's; the service times the course's command itself (here the wall time the worker sees
from outside the container: CI has no GPU, the ncu path runs on the GPU host, see
bench/ranked_gpu.py) and checks the predictions against answers the container never sees.

Each test is one thing a hostile student tries, through the real service and Docker engine."""

from __future__ import annotations

import io
import re
import tarfile

import pytest
from helpers import BUSYBOX, make_project

pytestmark = pytest.mark.timeout(300)

LABELS = "3\n1\n4\n1\n5\n9\n2\n6\n"
RIGHT = "printf '3\\n1\\n4\\n1\\n5\\n9\\n2\\n6\\n' > predictions.txt"
COURSE = f"""# the course's build file for 'final': the student supplies solution.sh and report.pdf
rai:
  version: 0.2
  image: {BUSYBOX}
commands:
  build:
    - cp /src/solution.sh /build/solution.sh
    - echo course build done
ranked:
  student_files: [solution.sh, report.pdf]
  timed: sh ./solution.sh
  repeats: 3
  measure: wall
  predictions: predictions.txt
  tolerance: 0.5
"""


@pytest.fixture(scope="module")
def course(docker_service, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("course")
    (tmp / "final.yml").write_text(COURSE)
    (tmp / "labels.txt").write_text(LABELS)
    res = docker_service.client("admin", "course", "install", "final", str(tmp / "final.yml"), "--labels", str(tmp / "labels.txt"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "'final' now runs the course's build file version 1" in res.stdout and "checks 8 answers" in res.stdout
    return docker_service


def submit(svc, tmp_path, solution: str, commands: list[str] | None = None, name: str = "student"):
    """A student's final: their own build file (ignored) and solution.sh; the job's JSON and output."""
    profile = svc.add_user(name)
    proj = make_project(tmp_path / name, commands or ["echo my own build file"],
                        files={"solution.sh": solution, "report.pdf": "%PDF-1.4"})
    res = svc.client("submit", "-p", str(proj), "--kind", "final", env={"RAI_PROFILE": str(profile)}, timeout=180)
    job_id = re.search(r"Job (\S+) queued", res.stdout)
    assert job_id, res.stdout + res.stderr
    with svc.http() as h:
        return h.get(f"/api/v1/jobs/{job_id.group(1)}").json(), res.stdout + res.stderr


def ranked(svc) -> list[dict]:
    with svc.http() as h:
        return h.get("/api/v1/leaderboard").json()


def test_the_forged_echo_run_does_not_run_and_cannot_rank(course, tmp_path):
    """The issue's attack: a final whose only command echoes a perfect op time and correctness."""
    forged = ["sh -c \"echo 'Op Time: 0.000001'; echo 'Correctness: 1.0 Model: 100'\""]
    job, out = submit(course, tmp_path, "echo nothing computed", commands=forged, name="forger")
    assert "built and timed by the course's build file (version 1); your rai_build.yml is not used" in out, out
    assert "Op Time: 0.000001" not in out and "course build done" in out  # the course's commands ran, not theirs
    m = job["results"]["measured"]
    assert m["problem"] == "timed run 1 of 3 left no predictions.txt in /build (the file the course's program writes its answers to)"
    assert all(e["name"] != "forger" for e in ranked(course))


def test_an_honest_run_ranks_with_the_measured_time_and_the_checked_answers(course, tmp_path):
    job, out = submit(course, tmp_path, f"{RIGHT}; sleep 0.4; echo Op Time: 0.4", name="honest")
    assert job["state"] == "succeeded", out
    m = job["results"]["measured"]
    assert m["problem"] is None and m["accuracy"] == 1.0 and len(m["runs"]) == 3 and m["course_version"] == 1
    assert all(0.4 <= t < 3.0 for t in m["runs"]) and m["op_time"] == sorted(m["runs"])[1]
    row = next(e for e in ranked(course) if e["name"] == "honest")
    assert row["verified"] and row["op_time"] == m["op_time"] and row["runs"] == 3 and row["correctness"] == 1.0


def test_printed_op_time_and_correctness_are_shown_never_ranked(course, tmp_path):
    job, _ = submit(course, tmp_path, f"{RIGHT}; sleep 0.3; echo Op Time: 0.000001; echo Correctness: 1.0 Model: x",
                    name="printer")
    m = job["results"]["measured"]
    assert job["results"]["op_time_total"] == 0.000001  # what it printed, kept and shown
    assert m["op_time"] >= 0.3 and m["printed_op_time"] == 0.000001
    assert any("the program printed an op time of 1e-06 s; the service measured" in f for f in m["flags"])
    row = next(e for e in ranked(course) if e["name"] == "printer")
    assert row["op_time"] >= 0.3 and row["flags"]  # staff see why to look
    with course.http() as h:  # and the staff's CSV carries the measured time and the flag
        line = next(x for x in h.get("/api/v1/leaderboard.csv").text.splitlines() if x.split(",")[1] == "printer")
    assert f"{m['op_time']:.9f}" in line and "the program printed an op time of 1e-06 s" in line
    # wrong answers with a printed perfect correctness: measured accuracy decides, and it is off the board
    job, _ = submit(course, tmp_path, "printf '0\\n0\\n0\\n0\\n0\\n0\\n0\\n0\\n' > predictions.txt; echo Correctness: 1.0 Model: x",
                    name="guesser")
    assert job["results"]["correctness"] == {"x": 1.0} and job["results"]["measured"]["accuracy"] == 0.0
    assert all(e["name"] != "guesser" for e in ranked(course))


def test_a_background_process_cannot_change_the_answers_after_the_timed_run(course, tmp_path):
    """Fast wrong answers in the timed run, the right ones written by a process it left behind."""
    job, _ = submit(course, tmp_path,
                    f"printf 'x\\n' > predictions.txt; (sleep 1; {RIGHT}) > /dev/null 2>&1 & echo fast", name="swapper")
    m = job["results"]["measured"]
    assert m["accuracy"] == 0.0 and m["problem"] is None, m
    assert all(e["name"] != "swapper" for e in ranked(course))
    with course.http() as h:  # the build folder kept is what the timed run left: the swap never happened
        r = h.get(f"/api/v1/jobs/{job['id']}/build.tar.gz")
    with tarfile.open(fileobj=io.BytesIO(r.content)) as tar:
        member = next(m for m in tar.getmembers() if m.name.removeprefix("./") == "predictions.txt")
        assert tar.extractfile(member).read() == b"x\n"


def test_the_student_files_are_all_that_runs_of_their_project(course, tmp_path):
    """Their Makefile, data or a planted predictions file never reach the container."""
    job, out = submit(course, tmp_path, f"ls -1 /src; {RIGHT}", name="planter")
    assert job["state"] == "succeeded", out
    assert "report.pdf\nsolution.sh\n" in out.replace("\r", "")  # /src: only the course's named files
    # without one of them the submission is refused before it queues
    profile = course.add_user("forgetful")
    proj = make_project(tmp_path / "forgetful", ["true"], files={"report.pdf": "%PDF"})
    res = course.client("submit", "-p", str(proj), "--kind", "final", env={"RAI_PROFILE": str(profile)})
    assert res.returncode != 0 and "a 'final' submission must include solution.sh" in res.stderr, res.stderr


def test_a_student_build_file_cannot_claim_the_course_section(course, tmp_path):
    proj = make_project(tmp_path / "claim", ["true"], extra="ranked:\n  student_files: [x]\n  timed: x\n")
    res = course.client("submit", "-p", str(proj))
    assert res.returncode != 0 and "'ranked' belongs to the course's build file" in res.stderr, res.stderr


def test_only_instructors_install_and_every_version_is_kept(course, tmp_path):
    student = course.add_user("sneaky")
    with course.http(student) as h:
        r = h.put("/api/v1/admin/course/final", json={"build_file": COURSE, "labels": "1\n"})
        assert r.status_code == 403
    (tmp_path / "v2.yml").write_text(COURSE.replace("repeats: 3", "repeats: 2"))
    (tmp_path / "labels.txt").write_text(LABELS)
    res = course.client("admin", "course", "install", "final", str(tmp_path / "v2.yml"), "--labels", str(tmp_path / "labels.txt"))
    assert "version 2" in res.stdout, res.stdout + res.stderr
    shown = course.client("admin", "course", "show").stdout
    assert "final: version 2" in shown and "students supply: solution.sh, report.pdf" in shown, shown
    assert "timed: sh ./solution.sh (wall, 2 runs, the median ranks); 8 answers" in shown, shown
    bad = course.client("admin", "course", "install", "final", str(tmp_path / "labels.txt"), "--labels", str(tmp_path / "labels.txt"))
    assert bad.returncode != 0 and "course build file" in bad.stderr
    job, _ = submit(course, tmp_path, RIGHT, name="second")
    assert job["results"]["measured"]["course_version"] == 2 and len(job["results"]["measured"]["runs"]) == 2
