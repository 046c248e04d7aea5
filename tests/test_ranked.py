"""Issue 23: a leaderboard no student can forge. A ranked kind runs the course's build file, not
the student's; the service times the course's command itself (here the wall time the worker sees
from outside the container: CI has no GPU, the ncu path runs on the GPU host, see
bench/ranked_gpu.py) and checks the predictions against answers the container never sees.

Each test is one thing a hostile student tries, through the real service and Docker engine."""

from __future__ import annotations

import io
import re
import tarfile

import httpx
import pytest
from helpers import BUSYBOX, make_project

pytestmark = pytest.mark.timeout(300)

LABELS = "3\n1\n4\n1\n5\n9\n2\n6\n"
RIGHT = "printf '3\\n1\\n4\\n1\\n5\\n9\\n2\\n6\\n' > predictions.txt"
COURSE = f"""# the course's build file for 'final': the student supplies solution.sh and report.pdf; the
# build runs it once (as the real course's build runs ./m2), the timed runs start from solution.sh alone
rai:
  version: 0.2
  image: {BUSYBOX}
commands:
  build:
    - cp /src/solution.sh /build/solution.sh
    - sh ./solution.sh build
    - echo course build done
ranked:
  student_files: [solution.sh, report.pdf]
  timed: sh ./solution.sh
  repeats: 3
  measure: wall
  predictions: predictions.txt
  tolerance: 0.5
  keep: [solution.sh]
  cpu_seconds: 0.6
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
    proj = make_project(tmp_path / name, commands or ["echo my own build file"], files={"solution.sh": solution, "report.pdf": "%PDF-1.4"})
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
    job, _ = submit(course, tmp_path, f"{RIGHT}; sleep 0.3; echo Op Time: 0.000001; echo Correctness: 1.0 Model: x", name="printer")
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
    job, _ = submit(
        course, tmp_path, "printf '0\\n0\\n0\\n0\\n0\\n0\\n0\\n0\\n' > predictions.txt; echo Correctness: 1.0 Model: x", name="guesser"
    )
    assert job["results"]["correctness"] == {"x": 1.0} and job["results"]["measured"]["accuracy"] == 0.0
    assert all(e["name"] != "guesser" for e in ranked(course))


def test_a_background_process_cannot_change_the_answers_after_the_timed_run(course, tmp_path):
    """Fast wrong answers in the timed run, the right ones written by a process it left behind."""
    job, _ = submit(course, tmp_path, f"printf 'x\\n' > predictions.txt; (sleep 1; {RIGHT}) > /dev/null 2>&1 & echo fast", name="swapper")
    m = job["results"]["measured"]
    assert m["accuracy"] == 0.0 and m["problem"] is None, m
    assert all(e["name"] != "swapper" for e in ranked(course))
    with course.http() as h:  # the build folder kept is the build's: its swapper was ended before it wrote
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


# -- issue 32: what ranks covers all the work that produced the answers ---------------------------
HONEST_SLOW = f"sleep 1.2; {RIGHT}"  # the answers from "the GPU": time passes, the CPU idles


def verdict_line(out: str) -> str:
    return next((line for line in out.splitlines() if "Ranked #" in line or "Not ranked" in line), "")


def test_answers_computed_on_the_cpu_do_not_rank_and_say_why(course, tmp_path):
    """The cheat most students would think of: compute on the host's CPU (here two busy
    processes), faster in wall time than the honest run, one trivial "kernel". The CPU time of
    every process of the timed run, read outside the container, is over the course's budget."""
    honest, out_h = submit(course, tmp_path, HONEST_SLOW, name="gpu-honest")
    assert honest["results"]["measured"]["problem"] is None, honest
    assert verdict_line(out_h).startswith("✱ Ranked #"), out_h
    burn = "i=0; while [ $i -lt 1000000 ]; do i=$((i+1)); done"
    cheat, out = submit(course, tmp_path, f"({burn}) & ({burn}) & wait; {RIGHT}", name="cpu-cheat")
    m = cheat["results"]["measured"]
    assert m["problem"] and re.search(r"s of CPU time in timed run 1 of \d \(the course allows 0.6 s\)", m["problem"]), m
    assert "✱ Not ranked: " in verdict_line(out) and "of CPU time" in verdict_line(out), out
    assert all(e["name"] != "cpu-cheat" for e in ranked(course))
    assert honest["results"]["measured"]["cpu_seconds"] and max(honest["results"]["measured"]["cpu_seconds"]) < 0.6


def test_a_cache_filled_by_the_build_or_an_earlier_timed_run_is_gone(course, tmp_path):
    """Every timed run starts from the course's kept files in a fresh container: what the build
    (which runs the student's code) or timed run 1 left in /build or /tmp is not there."""
    cache = (
        "if [ -f /build/cache ] || [ -f /tmp/cache ]; then cat /build/cache > predictions.txt 2>/dev/null || "
        f"cat /tmp/cache > predictions.txt; echo took-the-cache; else sleep 1.2; {RIGHT}; "
        "cp predictions.txt /build/cache; cp predictions.txt /tmp/cache; fi"
    )
    job, out = submit(course, tmp_path, cache, name="cacher")
    m = job["results"]["measured"]
    assert m["problem"] is None and m["accuracy"] == 1.0, m
    assert all(t >= 1.2 for t in m["runs"]), m["runs"]  # no timed run found a cache
    assert "took-the-cache" not in out


@pytest.mark.parametrize("how", ["child", "setsid"])
def test_a_process_that_writes_after_the_timed_command_exits_is_frozen_first(course, tmp_path, how):
    """The command exits at once; a process it left writes the answers 50 ms later. rai-timed
    stops every process of the job the moment the command ends, before anything is read."""
    leave = "sh late.sh > /dev/null 2>&1 &" if how == "child" else "(setsid sh late.sh > /dev/null 2>&1 &)"
    solution = f"cat > late.sh <<'EOF'\nsleep 0.05\n{RIGHT}\nEOF\n{leave}\necho done\n"
    job, out = submit(course, tmp_path, solution, name=f"late-{how}")
    m = job["results"]["measured"]
    assert re.fullmatch(
        r"timed run 1 of \d left no predictions.txt in /build \(the file the course's program writes its answers to\)", m["problem"] or ""
    ), m
    assert verdict_line(out) == f"✱ Not ranked: {m['problem']}", out
    assert all(e["name"] != f"late-{how}" for e in ranked(course))


def test_the_student_learns_why_a_wrong_run_does_not_rank(course, tmp_path):
    """Accuracy under the course's threshold: the run succeeds (the program ran) and one line says
    it does not rank, and why; the job page shows the same as a banner."""
    job, out = submit(course, tmp_path, "printf '3\\n1\\n4\\n0\\n0\\n0\\n0\\n0\\n' > predictions.txt", name="wrongish")
    assert job["state"] == "succeeded"
    assert verdict_line(out) == "✱ Not ranked: accuracy 0.375 is below 0.8", out
    assert job["results"]["measured"]["verdict"] == "Not ranked: accuracy 0.375 is below 0.8"
    from raiprotocol.profile import read_profile_file

    p = read_profile_file(course.profile)
    with httpx.Client(base_url=course.url, timeout=30) as web:  # the job's page, as staff see it in a browser
        token = re.search(r'name="csrf" value="([^"]+)"', web.get("/login").text)
        web.post("/login", data={"access_key": p.access_key, "secret_key": p.secret_key, **({"csrf": token.group(1)} if token else {})})
        page = web.get(f"/jobs/{job['id']}")
    assert page.status_code == 200 and 'id="verdict"' in page.text and "Not ranked: accuracy 0.375 is below 0.8" in page.text


def test_no_job_process_can_signal_the_container_init_or_keepalive(docker_service, tmp_path):
    """The keepalive is root's: a job cannot stop it, kill it or attach to it (as the job's own
    user it once became a loop that rewrote the answers after every kill pass)."""
    probe = (
        "keep=$(cut -d' ' -f1 /proc/1/task/1/children); for p in 1 $keep; do "
        "kill -STOP $p 2>/dev/null && echo signalled $p || echo refused $p; done"
    )
    proj = make_project(tmp_path / "keepalive", ["sh /src/probe.sh"], files={"probe.sh": probe})
    res = docker_service.client("submit", "-p", str(proj))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "signalled" not in res.stdout and res.stdout.count("refused") == 2, res.stdout


def test_staff_can_measure_an_entry_again_and_its_result_replaces_it(course, tmp_path):
    """Issue 32: a TA doubts an entry; a re-measure runs the same files with the same course build,
    more timed runs, audited; once it ends its result stands on the board instead of the original."""
    job, _ = submit(course, tmp_path, f"sleep 0.3; {RIGHT}", name="doubted")
    ta = course.add_user("ta-remeasure", role="ta")
    student = course.add_user("nosy")
    with course.http(student) as h:  # students may not
        assert h.post(f"/api/v1/admin/jobs/{job['id']}/remeasure").status_code == 403
    res = course.client("admin", "remeasure", job["id"], "--repeats", "4", env={"RAI_PROFILE": str(ta)})
    assert res.returncode == 0 and "measures " + job["id"] + " again (4 timed runs)" in res.stdout, res.stdout + res.stderr
    again = re.search(r"job (\S+) measures", res.stdout).group(1)
    follow = course.client("logs", again, "--follow", timeout=120)
    assert follow.returncode == 0 and f"A re-measure of job {job['id']}, asked for by ta-remeasure" in follow.stdout, follow.stdout
    with course.http() as h:
        redo = h.get(f"/api/v1/jobs/{again}").json()
        audit = h.get("/api/v1/admin/audit").json()
    assert len(redo["results"]["measured"]["runs"]) == 4 and redo["results"]["measured"]["problem"] is None, redo
    row = next(e for e in ranked(course) if e["name"] == "doubted")
    assert row["job_id"] == again and row["runs"] == 4  # the re-measured result stands, once
    assert any(a["action"] == "job.remeasure" and a["target"] == job["id"] and a["actor"] == "ta-remeasure" for a in audit)


def test_a_ranked_run_waits_in_its_own_place_and_gets_the_host_before_the_queue(docker_engine, redis_url, tmp_path):
    """Issue 32: both slots busy and three jobs queued ahead of it in the fair order, a ranked run is
    still released at once (its own lane: one reserved place per host) and claimed at once, in the
    pool's process for ranked runs (it holds no slot while it waits), says what it waits for, and
    runs as soon as the running jobs end, before the queued ones. A student's own `exclusive: true`
    gets no such lane: it waits its turn on the slots."""
    import time
    from datetime import datetime

    from helpers import jobs_at_their_end, start_service

    extra = {"RAI_STAFF_PRIORITY": "false", "RAI_SUBMISSIONS_PER_MINUTE": "1000"}
    svc = start_service(tmp_path / "svc", redis_url, None, "docker", slots=2, extra_env=extra)
    try:
        (tmp_path / "final.yml").write_text(COURSE)
        (tmp_path / "labels.txt").write_text(LABELS)
        res = svc.client("admin", "course", "install", "final", str(tmp_path / "final.yml"), "--labels", str(tmp_path / "labels.txt"))
        assert res.returncode == 0, res.stdout + res.stderr
        students = [svc.add_user(f"s{i}") for i in range(5)]
        short_first = make_project(tmp_path / "first", ["sh -c 'sleep 4; echo done'"])
        long_run = make_project(tmp_path / "long", ["sh -c 'sleep 10; echo done'"])
        short_run = make_project(tmp_path / "short", ["echo queued"])
        mine = make_project(tmp_path / "mine", ["echo alone"], extra="resources:\n  gpu:\n    exclusive: true\n")
        final = make_project(tmp_path / "final", ["echo ignored"], files={"solution.sh": RIGHT, "report.pdf": "%PDF-1.4"})

        def submit(proj, who: int, *kind: str) -> str:
            res = svc.client("submit", "-p", str(proj), "--detach", *kind, env={"RAI_PROFILE": str(students[who])})
            assert res.returncode == 0, res.stdout + res.stderr
            return re.search(r"\b([0-9A-Z]{26})\b", res.stdout + res.stderr).group(1)

        with svc.http() as h:
            running = [submit(short_first, 0), submit(long_run, 1)]
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and any(h.get(f"/api/v1/jobs/{i}").json()["state"] != "running" for i in running):
                time.sleep(0.2)
            queued = [submit(short_run, who) for who in (2, 3)] + [submit(mine, 4)]  # never served: ahead of s0
            ranked = submit(final, 0, "--kind", "final")
            released_early = h.get(f"/api/v1/jobs/{ranked}").json()["released_at"]
            waiting = None
            deadline = time.monotonic() + 12
            while time.monotonic() < deadline and not waiting:
                waiting = h.get(f"/api/v1/jobs/{ranked}").json().get("waiting")
                time.sleep(0.2)
            ids = running + queued + [ranked]
            jobs = jobs_at_their_end(h, ids, 150)
            log = h.get(f"/api/v1/jobs/{ranked}/log.txt").text
    finally:
        svc.shutdown()

    def at(job: dict, name: str, last: bool = False) -> datetime:
        found = [datetime.fromisoformat(p["at"]) for p in job["phases"] if p["name"] == name]
        return found[-1] if last else found[0]

    assert all(j["state"] == "succeeded" for j in jobs.values()), {i: (j["state"], j.get("message")) for i, j in jobs.items()}
    assert released_early is not None, "the ranked run was not released while the slots were busy"
    assert waiting and "other job(s) on w1 to end" in waiting, waiting  # the student sees why it waits
    assert "2 other job(s) on w1" in log and "An exclusive run: w1 runs nothing else until it ends" in log, log
    ends = [at(jobs[i], "command ended", last=True) for i in running]
    assert at(jobs[ranked], "claimed") < min(ends), "the ranked run waited for a slot's process to free"
    r_start = at(jobs[ranked], "command started")
    assert (r_start - max(ends)).total_seconds() < 5, "the ranked run did not get the host once its jobs ended"
    assert all(at(jobs[i], "command started") > r_start for i in queued), "a queued job went before the ranked run"
