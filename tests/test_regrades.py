"""Issue 36, part 4: regrade requests, on PostgreSQL, through the real client and the real browser.

A student asks for a regrade of a run with a message (`raiclient regrade`, or the job page's form);
staff see the open requests (`raiclient admin regrades`, /regrades) and re-measure the run, adjust
its grade with a reason, or close it with an answer, audited; the student reads the outcome
(`raiclient regrades`, the job page). Bad input gets one line and changes nothing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import make_project
from helpers.ranked import HONEST_SH, course_file, ensure_course_image, offer_course_image

pytestmark = pytest.mark.timeout(300)
SHOTS = Path("/tmp/shots36b")

COURSE = course_file("[solution.sh]", extra="  keep: [solution.sh]\n")
RIGHT = HONEST_SH


@pytest.fixture(scope="module")
def course(pg_service, docker_engine, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("course")
    (tmp / "final.yml").write_text(COURSE)
    ensure_course_image(docker_engine, tmp / "image")
    offer_course_image(pg_service, docker_engine)
    res = pg_service.client("admin", "course", "install", "final", str(tmp / "final.yml"))
    assert res.returncode == 0, res.stdout + res.stderr
    return pg_service


def run(svc, tmp_path: Path, profile: Path, kind: str = "final") -> str:
    """A run of ``kind`` by the student of ``profile``, waited for; its id."""
    proj = make_project(tmp_path / f"p-{profile.stem}-{kind}", ["echo dev build"], files={"solution.sh": RIGHT, "report.pdf": "%PDF-1.4"})
    res = svc.client("submit", "-p", str(proj), "--kind", kind, env={"RAI_PROFILE": str(profile)}, timeout=180)
    found = re.search(r"Job (\S+) queued", res.stdout)
    assert found and res.returncode == 0, res.stdout + res.stderr
    return found.group(1)


def as_(profile: Path) -> dict:
    return {"RAI_PROFILE": str(profile)}


def open_requests(svc) -> list[dict]:
    with svc.http() as h:
        return h.get("/api/v1/admin/regrades").json()


def test_a_student_asks_once_staff_remeasure_and_the_student_reads_the_outcome(course, tmp_path):
    svc = course
    ann = svc.add_user("rg_ann", team="rg-team")
    mate = svc.add_user("rg_mate", team="rg-team")
    stranger = svc.add_user("rg_stranger")
    ta = svc.add_user("rg_ta", role="ta")
    job = run(svc, tmp_path, ann)

    res = svc.client("regrade", job, "The timer caught a noisy neighbour; my kernel is faster than this.", env=as_(ann))
    assert res.returncode == 0 and re.search(rf"Regrade request #\d+ for job {job} sent", res.stdout), res.stdout + res.stderr
    rid = int(re.search(r"#(\d+)", res.stdout).group(1))

    # bad input: one line each, and nothing changes
    refusals = [
        (ann, [job, "again please"], f"you already have an open regrade request (#{rid}) for job {job}"),
        (ann, [job, "x" * 2001], "the message is 2001 characters long; at most 2000"),
        (ann, [job, "   "], "the message is empty"),
        (stranger, [job, "let me in"], f"no job {job} (or not yours)"),
        (ta, [job, "staff asking"], "staff answer regrade requests; they do not ask for them"),
    ]
    for who, args, line in refusals:
        res = svc.client("regrade", *args, env=as_(who))
        assert res.returncode != 0 and line in res.stderr and len(res.stderr.strip().splitlines()) == 1, (line, res.stdout, res.stderr)
    assert [r["id"] for r in open_requests(svc) if r["job_id"] == job] == [rid]

    # a teammate has a request of their own on the team's run
    res = svc.client("regrade", job[:10], "I wrote half of it: same question", env=as_(mate))
    assert res.returncode == 0, res.stdout + res.stderr

    # staff see the open requests, oldest first, with the messages; a student may not
    res = svc.client("admin", "regrades", env=as_(ta))
    assert res.returncode == 0 and f"#{rid} rg_ann on job {job} ('final')" in res.stdout, res.stdout + res.stderr
    assert "message: The timer caught a noisy neighbour" in res.stdout and "rg_mate" in res.stdout
    res = svc.client("admin", "regrades", env=as_(ann))
    assert res.returncode != 0 and "staff only" in res.stderr

    # the TA measures the run again; the request closes and says with which job
    res = svc.client(
        "admin", "regrade", str(rid), "--remeasure", "--repeats", "3", "--answer", "Measured again on an idle GPU.", env=as_(ta)
    )
    assert res.returncode == 0 and f"Regrade request #{rid} (rg_ann, job {job}) closed: re-measured by rg_ta as job" in res.stdout, (
        res.stdout + res.stderr
    )
    again = re.search(r"as job (\S+)", res.stdout).group(1)
    follow = svc.client("logs", again, "--follow", timeout=120)
    assert follow.returncode == 0 and f"A re-measure of job {job}, asked for by rg_ta" in follow.stdout, follow.stdout
    with svc.http() as h:
        redo = h.get(f"/api/v1/jobs/{again}").json()
        audit = h.get("/api/v1/admin/audit").json()
    assert redo["state"] == "succeeded" and len(redo["results"]["measured"]["runs"]) == 3, redo
    assert any(
        a["action"] == "regrade.remeasure" and a["target"] == f"#{rid}" and a["actor"] == "rg_ta" and a["detail"]["new_job"] == again
        for a in audit
    )
    assert any(a["action"] == "job.remeasure" and a["target"] == job for a in audit)

    # answered once: a second answer changes nothing
    res = svc.client("admin", "regrade", str(rid), "--answer", "changed my mind", env=as_(ta))
    assert res.returncode != 0 and f"regrade request #{rid} was already remeasured by rg_ta; nothing changed" in res.stderr, res.stderr

    # the student reads the outcome, and may ask again now that it is answered
    res = svc.client("regrades", env=as_(ann))
    assert res.returncode == 0 and f"re-measured by rg_ta as job {again}" in res.stdout, res.stdout + res.stderr
    assert "answer: Measured again on an idle GPU." in res.stdout
    assert svc.client("regrade", job, "still slow?", env=as_(ann)).returncode == 0


def test_staff_adjust_a_grade_with_a_reason_or_answer_and_bad_answers_change_nothing(course, tmp_path):
    svc = course
    bo = svc.add_user("rg_bo")
    ta = svc.add_user("rg_ta2", role="ta")
    # a graded kind that is not ranked: its runs count toward a grade, and cannot be measured again
    assert svc.client("admin", "kinds", "set", "dev", "--grade", "pass").returncode == 0
    job = run(svc, tmp_path, bo, kind="dev")
    assert svc.client("regrade", job, "My report was not counted.", env=as_(bo)).returncode == 0
    rid = next(r["id"] for r in open_requests(svc) if r["job_id"] == job)

    for args, line in [
        (["--remeasure"], "only a ranked run (one the course's build file built and timed) can be measured again"),
        (["--grade", "95"], "the reason for the new grade is empty"),
        (["--grade", "9" * 40, "--reason", "x"], "the grade is 40 characters long; at most 32"),
        ([], "the answer is empty"),
        (["--answer", "y" * 2001], "the answer is 2001 characters long; at most 2000"),
        (["--remeasure", "--grade", "95"], "give either --remeasure or --grade, not both"),
    ]:
        res = svc.client("admin", "regrade", str(rid), *args, env=as_(ta))
        assert res.returncode != 0 and line in res.stderr, (args, res.stdout, res.stderr)
    res = svc.client("admin", "regrade", "999999", "--answer", "hello", env=as_(ta))
    assert res.returncode != 0 and "no regrade request #999999" in res.stderr
    still = next(r for r in open_requests(svc) if r["id"] == rid)
    assert still["state"] == "open" and still["outcome"] is None and still["grade"] is None

    res = svc.client("admin", "regrade", str(rid), "--grade", "95", "--reason", "The report counts: it was on time.", env=as_(ta))
    assert res.returncode == 0 and "grade adjusted to 95 by rg_ta2: The report counts: it was on time." in res.stdout, (
        res.stdout + res.stderr
    )
    res = svc.client("regrades", env=as_(bo))
    assert f"#{rid} job {job} ('dev')" in res.stdout and "grade adjusted to 95 by rg_ta2" in res.stdout, res.stdout

    assert svc.client("regrade", job, "And the figure?", env=as_(bo)).returncode == 0
    rid2 = next(r["id"] for r in open_requests(svc) if r["job_id"] == job)
    res = svc.client("admin", "regrade", str(rid2), "--answer", "The figure was graded as it is.", env=as_(ta))
    assert res.returncode == 0 and "answered by rg_ta2" in res.stdout
    with svc.http() as h:
        audit = h.get("/api/v1/admin/audit").json()
    assert any(
        a["action"] == "regrade.adjust" and a["detail"]["grade"] == "95" and a["detail"]["reason"].startswith("The report") for a in audit
    )
    assert any(a["action"] == "regrade.close" and a["target"] == f"#{rid2}" for a in audit)
    assert not [r for r in open_requests(svc) if r["job_id"] == job]
    mine = svc.client("regrades", env=as_(bo)).stdout
    assert mine.index(f"#{rid2}") < mine.index(f"#{rid}") and "answer: The figure was graded as it is." in mine


def test_the_job_page_form_and_the_staff_page_in_a_browser(course, tmp_path):
    from playwright.sync_api import sync_playwright
    from test_web import CHROMIUM, login

    svc = course
    SHOTS.mkdir(parents=True, exist_ok=True)
    cy = svc.add_user("rg_cy")
    ta = svc.add_user("rg_ta3", role="ta")
    job = run(svc, tmp_path, cy)
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = login(b, svc, cy)
        page.goto(f"{svc.url}/jobs/{job}")
        page.fill("#regrade-form textarea[name=message]", "Correctness should be 1.0: the checker rounds.")
        page.screenshot(path=str(SHOTS / "regrade-job-form.png"), full_page=True)
        page.click("#regrade-form button")
        page.wait_for_url(f"**/jobs/{job}#regrades")
        text = page.inner_text("#regrades")
        assert "Correctness should be 1.0: the checker rounds." in text and "Waiting for staff to answer." in text
        assert page.locator("#regrade-form").count() == 0  # one open request per run: no second form
        page.goto(f"{svc.url}/regrades")
        assert page.url.endswith("/regrades") and "staff" in page.inner_text("main").lower()  # refused to a student
        page.close()

        # issue 49: beside each request, the run's op time, the grade as it stands, and its re-measures so far
        assert svc.client("admin", "kinds", "set", "final", "--grade", "pass").returncode == 0
        res = svc.client("admin", "remeasure", job, "--repeats", "2", env=as_(ta))
        again = re.search(r"job (\S+) measures", res.stdout).group(1)
        assert svc.client("logs", again, "--follow", timeout=120).returncode == 0
        staff = login(b, svc, ta)
        staff.goto(f"{svc.url}/regrades")
        card = staff.locator(".regrade", has_text="the checker rounds")
        assert "rg_cy" in card.inner_text()
        facts = card.locator(".run-facts").inner_text()
        assert re.search(r"Op time\s+0\.\d{6} s \(measured by rai\)", facts), facts
        assert re.search(rf"Grade now\s+100 of 100 \(from job {again}\)", facts), facts
        assert re.search(rf"Re-measured\s+already: job {again} \(succeeded, 0\.\d{{6}} s\)", facts), facts
        staff.screenshot(path=str(SHOTS / "regrade-staff-open.png"), full_page=True)
        staff.set_viewport_size({"width": 400, "height": 860})
        staff.screenshot(path=str(SHOTS / "regrade-staff-open-400.png"), full_page=True)
        assert staff.evaluate("document.documentElement.scrollWidth") <= 400
        staff.set_viewport_size({"width": 1280, "height": 860})
        # an adjustment without a grade is refused in one sentence; the request stays open
        card.locator("form", has_text="Adjust the grade").locator("input[name=grade]").fill("   ")
        card.locator("form", has_text="Adjust the grade").locator("textarea[name=reason]").fill("rounding")
        card.locator("form", has_text="Adjust the grade").locator("button").click()
        assert "the grade is empty" in staff.inner_text("main")
        staff.screenshot(path=str(SHOTS / "regrade-refused.png"), full_page=True)
        staff.goto(f"{svc.url}/regrades")
        card = staff.locator(".regrade", has_text="the checker rounds")
        card.locator("form", has_text="Adjust the grade").locator("input[name=grade]").fill("100")
        card.locator("form", has_text="Adjust the grade").locator("textarea[name=reason]").fill("The checker rounded 0.9999 down.")
        card.locator("form", has_text="Adjust the grade").locator("button").click()
        staff.wait_for_url("**/regrades")
        assert staff.locator(".regrade", has_text="the checker rounds").count() == 0  # answered: not open any more
        staff.goto(f"{svc.url}/regrades?everything=true")
        assert "Grade adjusted to 100 by rg_ta3: The checker rounded 0.9999 down." in staff.inner_text("main")
        notice = staff.locator(".regrade .notice", has_text="Grade adjusted to 100").first
        assert notice.evaluate("e => getComputedStyle(e).backgroundColor") == "rgb(239, 246, 255)"  # information, not the error's red
        staff.screenshot(path=str(SHOTS / "regrade-staff-all.png"), full_page=True)
        staff.close()

        page = login(b, svc, cy)
        page.goto(f"{svc.url}/jobs/{job}")
        text = page.inner_text("#regrades")
        assert "Grade adjusted to 100 by rg_ta3: The checker rounded 0.9999 down." in text
        assert page.locator("#regrade-form").count() == 1  # answered: the student may ask again
        page.locator("#regrades").screenshot(path=str(SHOTS / "regrade-job-outcome.png"))
        page.screenshot(path=str(SHOTS / "regrade-job-outcome-page.png"), full_page=True)
        page.close()
        b.close()
