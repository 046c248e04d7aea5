"""Issues 23, 32, 46: a leaderboard no student can win without doing the work. A ranked kind runs
the course's build file, not the student's; rai-timed (root in the timed run's container, out of
the job's reach) holds the clock, draws each operation's inputs after its begin mark and freezes
the whole cgroup at its end mark; the outputs are checked against the course's reference on the
same inputs. CI has no GPU: a CPU convolution stands in for the GPU's (tests/fixtures/ranked_op/op.c,
with the course's harness rai_op.h), the GPU's run on the GPU host (bench/ranked_op_gpu.py).

Each test is one thing a hostile student tries (../shared/cheat-classes.md), through the real service
and Docker engine, beside an honest run: none ranks ahead of it, and each is told why."""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx
import pytest
from helpers import make_project
from helpers.ranked import IMAGE, build_op, ensure_course_image, offer_course_image
from helpers.service import wait_for

pytestmark = pytest.mark.timeout(300)

COURSE = f"""# the course's build file for 'final': the student supplies op (their program, built with the
# course's harness) and report.pdf; the reference (the course's own op) comes from the course's image
rai:
  version: 0.2
  image: {IMAGE}
commands:
  build:
    - cp /src/op /build/op
    - chmod 755 /build/op
    - cp /opt/rai/op/ref /build/ref
    - "sh -c 'echo the vendor library in the build has $(wc -c < /usr/lib/libfastconv.so.1) bytes'"
    - "sh -c 'echo in the build, /src holds: $(ls /src)'"
    - echo course build done
ranked:
  student_files: [op, report.pdf]
  timed: ./op
  reference: ./ref
  repeats: 3
  keep: [op, ref]
  cpu_seconds: 1.5
  forbid: [libfastconv*]
  build_files: [op]
  tolerance: 0.5
"""


@pytest.fixture(scope="module")
def course_image(docker_engine, tmp_path_factory):
    """The course's image: busybox and the course's reference program at /opt/rai/op/ref."""
    return ensure_course_image(docker_engine, tmp_path_factory.mktemp("course-image"))


@pytest.fixture(scope="module")
def course(docker_service, docker_engine, course_image, tmp_path_factory):
    offer_course_image(docker_service, docker_engine)
    tmp = tmp_path_factory.mktemp("course")
    (tmp / "final.yml").write_text(COURSE)
    res = docker_service.client("admin", "course", "install", "final", str(tmp / "final.yml"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "'final' now runs the course's build file version 1" in res.stdout and "checks its outputs against './ref'" in res.stdout
    return docker_service


def submit(svc, tmp_path, variant: str, name: str | None = None, commands: list[str] | None = None):
    """A student's final: their own build file (ignored) and their op; the job's JSON and output."""
    name = name or variant
    profile = svc.add_user(name)
    proj = make_project(tmp_path / name, commands or ["echo my own build file"], files={"report.pdf": "%PDF-1.4"})
    build_op(variant, proj / "op")
    res = svc.client("submit", "-p", str(proj), "--kind", "final", env={"RAI_PROFILE": str(profile)}, timeout=240)
    job_id = re.search(r"Job (\S+) queued", res.stdout)
    assert job_id, res.stdout + res.stderr
    with svc.http() as h:
        return h.get(f"/api/v1/jobs/{job_id.group(1)}").json(), res.stdout + res.stderr


def ranked(svc) -> list[dict]:
    with svc.http() as h:
        return h.get("/api/v1/leaderboard").json()


def verdict_line(out: str) -> str:
    return next((line for line in out.splitlines() if "Ranked #" in line or "Not ranked" in line), "")


@pytest.fixture(scope="module")
def honest(course, tmp_path_factory):
    """The honest run every cheat is held against."""
    job, out = submit(course, tmp_path_factory.mktemp("honest"), "honest")
    assert job["state"] == "succeeded", out
    return job, out


def test_an_honest_run_ranks_by_its_operations_time_checked_against_the_reference(course, honest):
    job, out = honest
    m = job["results"]["measured"]
    assert m["problem"] is None and m["accuracy"] == 1.0 and m["measure"] == "op" and len(m["runs"]) == 3, m
    assert m["error"] is not None and m["error"] < 1e-6  # the same sums in the same order: the reference's outputs
    assert all(0.001 < t < 2.0 for t in m["runs"]) and m["op_time"] == sorted(m["runs"])[1]
    assert m["reference_time"] and m["reference_time"] > 0
    assert m["inputs_copied_in"] is True  # the harness's "Q", as rai-timed recorded it (review F2)
    assert "course build done" in out and "Reference runs: the course's ./ref, on each timed run's inputs" in out
    assert verdict_line(out).startswith("✱ Ranked #"), out
    row = next(e for e in ranked(course) if e["name"] == "honest")
    assert row["verified"] and row["op_time"] == m["op_time"] and row["runs"] == 3


def test_printed_op_time_and_correctness_are_shown_never_ranked(course, honest, tmp_path):
    """C19: what the program prints is shown and flagged, never ranked."""
    job, _ = submit(course, tmp_path, "printer")
    m = job["results"]["measured"]
    assert job["results"]["op_time_total"] == 0.000001  # what it printed, kept and shown
    assert m["problem"] is None and m["op_time"] > 0.001 and m["printed_op_time"] == 0.000001
    assert any("the program printed an op time of 1e-06 s; the service measured" in f for f in m["flags"])


DIFFERS = r"the outputs of operation {} differ from the course's reference by \S+ \(relative; the course allows 0.0001\)"
NOT_THE_WORK = {
    # C02: returns at once; a thread computes after the end mark (and would finish before the reading)
    "thread": r"timed run 1 of 3: the outputs of operation 1 changed after its end mark: work went on after the clock stopped",
    # C30: wrong outputs at the end mark, then the main thread exits (a zombie leader); its thread writes the right ones
    "zombie": r"timed run 1 of 3: the outputs of operation 1 changed after its end mark: work went on after the clock stopped",
    # C03: an auto-reaped child (SIGCHLD ignored) computes after the end mark
    "child": r"timed run 1 of 3: the outputs of operation 1 changed after its end mark: work went on after the clock stopped",
    # C04/C14: the work before the clock, on inputs it guesses
    "precompute": "timed run 1 of 3: " + DIFFERS.format(1),
    # C06/C07: the first operation's outputs replayed for the next
    "cache": "timed run 1 of 3: " + DIFFERS.format(2),
    # C16: all but the last image of the batch
    "partial": "timed run 1 of 3: " + DIFFERS.format(1),
    # C17: inputs cut to bfloat16
    "precision": "timed run 1 of 3: " + DIFFERS.format(1),
    # C19: an end mark of its own before the harness's
    "forger": r"timed run 1 of 3: the run broke the marks protocol \(an end without a begin\)",
    # more inputs and outputs than a run may ask rai-timed to hold
    "greedy": r"timed run 1 of 3: the run's operations asked for more than 4294967296 bytes of inputs and outputs in all",
    # a later pass's mark ("Q <in> <out> <k>") for memory of other sizes: rai-timed refuses it
    "borrow": r"timed run 1 of 3: the run broke the marks protocol \(operation 1's memory cannot serve operation 2\)",
    # C03: the CPU of auto-reaped children, which rusage never counts: the cgroup does, while it runs
    "cpuhog": r"timed run 1 of 3: the timed run was stopped once its processes had used \S+ s of CPU time, "
    r"more than the course's budget of 1.5 s",
}


@pytest.mark.parametrize("variant", sorted(NOT_THE_WORK))
def test_a_run_that_did_not_do_the_work_in_the_timed_span_does_not_rank_and_says_why(course, honest, tmp_path, variant):
    job, out = submit(course, tmp_path, variant)
    m = job["results"]["measured"]
    assert m["problem"] and re.fullmatch(NOT_THE_WORK[variant], m["problem"]), m
    assert verdict_line(out) == f"✱ Not ranked: {m['problem']}", out
    assert all(e["name"] != variant for e in ranked(course))
    assert next(e for e in ranked(course) if e["name"] == "honest")
    if variant == "cpuhog":  # its children would burn 60 s: stopped at the budget (looked at every 50 ms), not at the bound
        assert m["cpu_seconds"] and m["cpu_seconds"][0] < 2.5, m


@pytest.mark.parametrize("variant", ["mutate", "lease", "passfd", "predict"])
def test_what_cannot_be_done_to_the_inputs_or_the_reading(course, honest, tmp_path, variant):
    """C13: the inputs are sealed, read-only (a reference computed later sees what was drawn); the
    memory they are copied into at begin, which the job maps read-only at prepare, stays read-only
    even through its descriptor reopened for writing (a memfd is mode 0777): no writable mapping,
    no write, no hole punched under rai-timed's copy.
    C30: a lease or a lock on the outputs makes nothing wait: rai-timed never opens them again; a
    descriptor cannot be passed to rai-timed at all (closing a lingering socket would hold it in
    the kernel past the bound: the hostile review).
    C14: the inputs seen after the begin mark tell nothing of the others (each pair a keyed PRF's
    draw): a run cannot make its inputs instead of reading them. The runs did the work, so they rank."""
    job, out = submit(course, tmp_path, variant)
    m = job["results"]["measured"]
    assert m["problem"] is None and m["accuracy"] == 1.0, m
    if variant == "mutate":
        assert "mutating the inputs: refused" in out and "ALLOWED" not in out, out
        assert "mapped writable: refused; written: refused; a hole punched: refused" in out, out
    elif variant == "lease":
        assert "lease on the outputs: refused" in out and "TAKEN" not in out, out
        assert m["inputs_copied_in"] is False  # its first operation prepared with "P": recorded, allowed
    elif variant == "predict":  # C14: no input tells another (a keyed PRF per pair, not one stream)
        assert out.count("the inputs predicted from four of them: no") >= 2 and "YES" not in out, out
    else:
        assert "passing a descriptor to rai: refused" in out and "ACCEPTED" not in out, out
    assert job["phases"] and all(t < 2.0 for t in m["runs"])


def _timed_cgroups() -> set[str]:
    """The cgroup parents the worker made for timed runs (a hybrid host's unified hierarchy or a v2 one)."""
    return {p.name for root in (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup")) for p in root.glob("rai-timed-*")}


def _left_behind() -> list[str]:
    """Processes on this host that a 'carry' run left in a session of their own."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if cmdline.read_bytes() == b"sleep\x003601\x00":
                found.append(cmdline.parent.name)
        except OSError:
            continue
    return found


def test_nothing_of_one_timed_run_is_in_the_next_and_nothing_outlives_the_job(course, honest, tmp_path, docker_engine):
    """C06/C07 across runs: each timed run starts in a container made for it alone (made ahead,
    while the reference runs run, and never used before, with no CPU quota: the course's budget
    bounds it): a file a run leaves in /tmp or /build is not in the next, a process it leaves in a
    session of its own ends with it, and once the job's end is reported its run containers and
    their cgroup parents are gone from the host."""
    before = _timed_cgroups()
    job, out = submit(course, tmp_path, "carry")
    m = job["results"]["measured"]
    assert m["problem"] is None and m["accuracy"] == 1.0, m
    assert out.count("left by an earlier timed run: /tmp no, /build no") == 3 and "YES" not in out, out
    # the host is the run's alone and the course's CPU budget bounds it: no CFS quota to stall it mid-operation;
    # nor the course's reference runs (its trusted code, and rai-timed's draws and checks, side by side)
    assert len(re.findall(r"the run's CPU quota: (?:max|-1)\n", out)) == 6, out
    assert not _left_behind()
    mine = {"label": f"rai.job={job['id']}"}  # the engine's list as it is (containers.list() inspects each: a race)
    wait_for(lambda: not docker_engine.api.containers(all=True, filters=mine), what="the job's containers removed")
    wait_for(lambda: not (_timed_cgroups() - before), what="the timed runs' cgroup parents removed")


def test_a_library_the_course_forbids_is_not_in_the_timed_runs(course, honest, tmp_path):
    """C25: the course's image has a library that does the operation (a vendor's convolution); the
    course forbids it (ranked.forbid), so in each timed run's container its files read as empty,
    however the program asks for them (here it execs one; a dlopen or a read-and-map gets nothing either);
    nor can one come among the student's own files: a timed run has the kept build, and no /src;
    nor in the program: the build, where the student's source is compiled, reads them as empty too
    (an .incbin of the library would otherwise carry it into the kept program)."""
    job, out = submit(course, tmp_path, "library")
    m = job["results"]["measured"]
    assert m["problem"] == "timed run 1 of 3 exited with status 3", m
    # the two named so, a hard link to one under another name, one in a folder only crossable
    assert "The course forbids libfastconv*: 4 such file(s) of the image read as empty in this run" in out, out
    assert "the vendor library in the build has 0 bytes" in out, out  # nor can the build carry it into the program
    assert "in the build, /src holds: op\n" in out, out  # nor a library that came as report.pdf (build_files)
    assert "the vendor library is not there" in out, out
    assert "a library could come as my report.pdf" not in out, out  # nor is a student's file: the kept build alone
    assert all(e["name"] != "library" for e in ranked(course))


def test_a_final_cannot_hold_the_host_past_its_bound(course, honest, tmp_path):
    """A timed run that sleeps is stopped at its bound (20x the reference's run, at least 5 s,
    unless the course sets one): the host is free again, and the student is told why."""
    started = time.monotonic()
    job, out = submit(course, tmp_path, "sleeper")
    took = time.monotonic() - started
    m = job["results"]["measured"]
    stopped = r"timed run 1 of 3: it was stopped at its bound of (\S+) s \(the course's reference took (\S+) s\)"
    said = re.fullmatch(stopped, m["problem"] or "")
    assert said, m
    bound, ref = float(said[1]), float(said[2])  # the rule, whatever the host's load made of the reference
    assert bound == pytest.approx(min(120.0, max(5.0, 20 * ref)), rel=0.01, abs=0.01), m
    assert took < 60, took  # one bound, not the hour of the wall clock
    assert verdict_line(out) == f"✱ Not ranked: {m['problem']}", out


def test_the_forged_echo_run_does_not_run_and_cannot_rank(course, tmp_path):
    """The issue's attack: a final whose only command echoes a perfect op time and correctness."""
    forged = ["sh -c \"echo 'Op Time: 0.000001'; echo 'Correctness: 1.0 Model: 100'\""]
    job, out = submit(course, tmp_path, "forger", name="echoer", commands=forged)
    assert "built and timed by the course's build file (version 1); your rai_build.yml is not used" in out, out
    assert "Op Time: 0.000001" not in out and "course build done" in out  # the course's commands ran, not theirs
    assert all(e["name"] != "echoer" for e in ranked(course))


def test_the_student_files_are_all_that_runs_of_their_project(course, tmp_path):
    """Their Makefile, data or a planted reference never reach the container; without one of the
    named files the submission is refused before it queues."""
    profile = course.add_user("forgetful")
    proj = make_project(tmp_path / "forgetful", ["true"], files={"report.pdf": "%PDF"})
    res = course.client("submit", "-p", str(proj), "--kind", "final", env={"RAI_PROFILE": str(profile)})
    assert res.returncode != 0 and "a 'final' submission must include op" in res.stderr, res.stderr


def test_a_student_build_file_cannot_claim_the_course_section(course, tmp_path):
    proj = make_project(tmp_path / "claim", ["true"], extra="ranked:\n  student_files: [x]\n  timed: x\n")
    res = course.client("submit", "-p", str(proj))
    assert res.returncode != 0 and "'ranked' belongs to the course's build file" in res.stderr, res.stderr


def test_only_instructors_install_every_version_is_kept_and_old_measures_are_refused(course, honest, tmp_path):
    student = course.add_user("sneaky")
    with course.http(student) as h:
        r = h.put("/api/v1/admin/course/final", json={"build_file": COURSE})
        assert r.status_code == 403
    for old in ("kernels", "wall"):  # issue 46: what a profiler or a command's wall time says no longer ranks
        (tmp_path / f"{old}.yml").write_text(COURSE.replace("  reference: ./ref\n", f"  measure: {old}\n"))
        bad = course.client("admin", "course", "install", "final", str(tmp_path / f"{old}.yml"))
        assert bad.returncode != 0 and f"ranked.measure: {old} no longer ranks" in bad.stderr, bad.stderr
    (tmp_path / "v2.yml").write_text(COURSE.replace("repeats: 3", "repeats: 2\n  passes: 2"))
    res = course.client("admin", "course", "install", "final", str(tmp_path / "v2.yml"))
    assert "version 2" in res.stdout, res.stdout + res.stderr
    shown = course.client("admin", "course", "show").stdout
    assert "final: version 2" in shown and "students supply: op, report.pdf" in shown, shown
    assert "timed: ./op (op, 2 runs of 2 passes, the median pass ranks)" in shown, shown
    assert "checked against: ./ref (relative tolerance 0.0001)" in shown, shown
    # each timed run (and its reference) does the operations twice over: every pass is a sample
    job, out = submit(course, tmp_path, "honest", name="second")
    m = job["results"]["measured"]
    assert m["course_version"] == 2 and m["passes"] == 2 and len(m["runs"]) == 4 and m["op_time"] == sorted(m["runs"])[1], m
    assert "median of 4 passes (2 timed runs of 2)" in out, out
    row = next(e for e in ranked(course) if e["name"] == "second")
    assert row["runs"] == 2 and row["op_time"] == m["op_time"]  # the interval is the timed runs'
    # a later pass gets the earlier one's memory back (rai_op.h), once rai-timed has settled that one:
    # a thread still writing the first pass's outputs is seen there, as it is after the kill (C02)
    job, out = submit(course, tmp_path, "thread", name="laterpass")
    # (or, had it not written yet, operation 1 is checked as it was: not the work either)
    laterpass = r"timed run 1 of 2: the outputs of operation 1 (changed after its end mark: .*|differ from the course's reference .*)"
    assert re.fullmatch(laterpass, job["results"]["measured"]["problem"] or ""), out
    # a later pass's outputs start as zeros, as a new operation's: a program that adds into them ranks
    job, out = submit(course, tmp_path, "accumulate")
    assert job["results"]["measured"]["problem"] is None and len(job["results"]["measured"]["runs"]) == 4, out
    # a program that does fewer passes than the course's (each as fast) is held to the reference's count
    job, out = submit(course, tmp_path, "onepass")
    assert "timed run 1 of 2: it timed 2 operations; the course's reference times 4" in verdict_line(out), out
    (tmp_path / "v3.yml").write_text(COURSE)  # back to 3 runs for the tests after this one
    assert course.client("admin", "course", "install", "final", str(tmp_path / "v3.yml")).returncode == 0


def test_the_student_sees_the_verdict_on_the_jobs_page(course, tmp_path):
    job, _ = submit(course, tmp_path, "partial", name="pagecheck")
    from raiprotocol.profile import read_profile_file

    p = read_profile_file(course.profile)
    with httpx.Client(base_url=course.url, timeout=30) as web:  # the job's page, as staff see it in a browser
        token = re.search(r'name="csrf" value="([^"]+)"', web.get("/login").text)
        web.post("/login", data={"access_key": p.access_key, "secret_key": p.secret_key, **({"csrf": token.group(1)} if token else {})})
        page = web.get(f"/jobs/{job['id']}")
    assert (
        page.status_code == 200
        and 'id="verdict"' in page.text
        and "Not ranked: timed run 1 of 3: the outputs of operation 1 differ" in page.text
    )


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
    job, _ = submit(course, tmp_path, "honest", name="doubted")
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


def test_a_ranked_run_waits_in_its_own_place_and_gets_the_host_before_the_queue(docker_engine, course_image, redis_url, tmp_path):
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
        offer_course_image(svc, docker_engine)
        (tmp_path / "final.yml").write_text(COURSE)
        res = svc.client("admin", "course", "install", "final", str(tmp_path / "final.yml"))
        assert res.returncode == 0, res.stdout + res.stderr
        students = [svc.add_user(f"s{i}") for i in range(5)]
        short_first = make_project(tmp_path / "first", ["sh -c 'sleep 4; echo done'"])
        long_run = make_project(tmp_path / "long", ["sh -c 'sleep 10; echo done'"])
        short_run = make_project(tmp_path / "short", ["echo queued"])
        mine = make_project(tmp_path / "mine", ["echo alone"], extra="resources:\n  gpu:\n    exclusive: true\n")
        final = make_project(tmp_path / "final", ["echo ignored"], files={"report.pdf": "%PDF-1.4"})
        build_op("honest", final / "op")

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


def test_another_students_job_waits_for_one_timed_run_not_the_whole_ranked_job(docker_engine, course_image, redis_url, tmp_path):
    """Issue 46: a ranked run has the host alone for each timed run, but the jobs waiting for the
    host when one ends run before the next (each within its wall limit); the ranked run then has
    the host alone again, its time its own, and still ranks."""
    from datetime import datetime

    from helpers import jobs_at_their_end, start_service

    extra = {"RAI_STAFF_PRIORITY": "false", "RAI_SUBMISSIONS_PER_MINUTE": "1000"}
    svc = start_service(tmp_path / "svc", redis_url, None, "docker", slots=2, extra_env=extra)
    try:
        offer_course_image(svc, docker_engine)
        (tmp_path / "final.yml").write_text(COURSE.replace("repeats: 3", "repeats: 4"))
        assert svc.client("admin", "course", "install", "final", str(tmp_path / "final.yml")).returncode == 0
        students = [svc.add_user(f"s{i}") for i in range(2)]
        final = make_project(tmp_path / "final", ["echo ignored"], files={"report.pdf": "%PDF-1.4"})
        build_op("slow", final / "op")
        dev = make_project(tmp_path / "dev", ["echo my dev job ran"])

        def submit(proj, who: int, *kind: str) -> str:
            res = svc.client("submit", "-p", str(proj), "--detach", *kind, env={"RAI_PROFILE": str(students[who])})
            assert res.returncode == 0, res.stdout + res.stderr
            return re.search(r"\b([0-9A-Z]{26})\b", res.stdout + res.stderr).group(1)

        with svc.http() as h:
            ranked_id = submit(final, 0, "--kind", "final")
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline and h.get(f"/api/v1/jobs/{ranked_id}").json()["state"] != "running":
                time.sleep(0.1)  # the host is the ranked run's alone: its build, then its timed runs (~6.5 s)
            dev_id = submit(dev, 1)
            jobs = jobs_at_their_end(h, [ranked_id, dev_id], 150)
            log = h.get(f"/api/v1/jobs/{ranked_id}/log.txt").text
    finally:
        svc.shutdown()

    def at(job: dict, name: str, last: bool = False) -> datetime:
        found = [datetime.fromisoformat(p["at"]) for p in job["phases"] if p["name"] == name]
        return found[-1] if last else found[0]

    ranked_job, dev_job = jobs[ranked_id], jobs[dev_id]
    assert ranked_job["state"] == "succeeded" and dev_job["state"] == "succeeded", (ranked_job, dev_job)
    m = ranked_job["results"]["measured"]
    assert m["problem"] is None and len(m["runs"]) == 4 and all(1.5 < t < 3 for t in m["runs"]), m  # its own time, alone
    assert re.search(r"Before (its reference runs and timed run 1|timed run [234]): the jobs waiting for w1 run first", log), log
    started = at(dev_job, "command started")
    assert started < at(ranked_job, "timed run started", last=True), "the dev job waited for the whole ranked job"
    waited = (started - datetime.fromisoformat(dev_job["created_at"])).total_seconds()
    assert waited < m["runs"][0] + 10, waited  # one timed run (and the dev job's own start), not four
