"""The web view in real headless Chromium (Debian's), driven by Playwright; screenshots land in
tests/artifacts/ for a person to look at."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from helpers import make_project
from helpers.ranked import HONEST_SH, IMAGE, IN_IMAGE, ensure_course_image, offer_course_image

ARTIFACTS = Path(__file__).parent / "artifacts"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
REQUIRE_BROWSER = os.environ.get("RAI_REQUIRE_BROWSER") == "1"
pytestmark = [pytest.mark.timeout(300), pytest.mark.skipif(CHROMIUM is None and not REQUIRE_BROWSER, reason="chromium not installed")]


csp_errors: list[str] = []  # what the pages' Content Security Policy blocked (nothing, we check)


def login(browser, svc, profile: Path):
    from raiprotocol.profile import read_profile_file

    p = read_profile_file(profile)
    page = browser.new_page(viewport={"width": 1280, "height": 860})
    page.on("console", lambda m: csp_errors.append(m.text) if "Content Security Policy" in m.text else None)
    page.goto(f"{svc.url}/queue")
    assert page.url.endswith("/login")  # not logged in: sent to the login page
    page.fill("input[name=access_key]", p.access_key)
    page.fill("input[name=secret_key]", p.secret_key)
    page.click("button[type=submit]")
    page.wait_for_url("**/queue")
    return page


def test_login_rejects_wrong_keys_and_forms_need_csrf(browser, docker_service):
    page = browser.new_page()
    page.goto(f"{docker_service.url}/login")
    page.fill("input[name=access_key]", "nobody")
    page.fill("input[name=secret_key]", "wrong")
    page.click("button[type=submit]")
    assert "Unknown access key or wrong secret key." in page.inner_text("main")
    # the access key stays filled in, to correct the secret alone; the secret never comes back
    assert page.input_value("input[name=access_key]") == "nobody" and page.input_value("input[name=secret_key]") == ""
    import httpx

    r = httpx.post(f"{docker_service.url}/login", data={"access_key": "x", "secret_key": "y", "csrf": "forged"})
    assert r.status_code == 403
    cookie = page.context.cookies()[0]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    page.close()


def test_instructor_watches_queue_job_log_and_leaderboard_live(browser, docker_service, docker_engine, tmp_path):
    ARTIFACTS.mkdir(exist_ok=True)
    staff = docker_service.add_user("prof", role="instructor")
    page = login(browser, docker_service, staff)

    # the course's build file for 'final' (issue 23): it prints for a few seconds, with colours,
    # then the service times the student's solution.sh twice and checks its answer
    course = tmp_path / "final.yml"
    epochs = "sh -c 'for k in 1 2 3 4 5 6 7 8; do printf \"\\033[32mepoch $k ok\\033[0m\\n\"; sleep 0.5; done'"
    ensure_course_image(docker_engine, tmp_path / "image")
    offer_course_image(docker_service, docker_engine)
    course.write_text(
        f"rai: {{version: 0.2, image: {IMAGE}}}\ncommands:\n  build:\n    - {json.dumps(epochs)}\n"
        "    - cp /src/solution.sh /build/\n"
        f"ranked: {{student_files: [solution.sh], timed: sh ./solution.sh, reference: {IN_IMAGE}/ref, repeats: 2}}\n"
    )
    res = docker_service.client("admin", "course", "install", "final", str(course))
    assert res.returncode == 0, res.stdout + res.stderr
    proj = make_project(
        tmp_path / "p",
        ["echo never run: the course's build file is"],
        files={
            "report.pdf": "%PDF-1.4 report",
            "solution.sh": f"echo Op Time: 0.0123; echo Op Time: 0.0456; echo Correctness: 0.91 Model: ece408; {HONEST_SH}",
        },
    )
    proc = docker_service.popen_client("submit", "-p", str(proj), "--kind", "final")
    line = ""
    while " queued on " not in line:
        line = proc.stdout.readline()
    job_id = line.split()[2]

    # the queue page shows it running, without a reload
    page.wait_for_selector(f"#running a[href='/jobs/{job_id}']", timeout=20000)
    page.screenshot(path=str(ARTIFACTS / "queue.png"), full_page=True)

    # the job page: lines arrive while it runs, colours rendered
    page.goto(f"{docker_service.url}/jobs/{job_id}")
    # (locator waits, not wait_for_function: the page's CSP forbids evaluating strings, as it should)
    page.locator("#log .l-out").nth(2).wait_for(timeout=20000)
    first = page.locator("#log .l-out").count()
    assert first < 8, "the log should still be arriving"
    page.locator("#log .l-out").nth(7).wait_for(timeout=20000)
    assert page.locator("#log .ansi-green").first.text_content().startswith("epoch")
    page.screenshot(path=str(ARTIFACTS / "job-running.png"), full_page=True)
    proc.communicate(timeout=60)
    page.wait_for_selector("text=Download build folder", timeout=20000)  # reloaded at the end with results
    main = page.inner_text("main")
    assert "0.0123 + 0.0456 = 0.0579 s" in main  # what the program printed: shown, never ranked (as the client says it)
    assert "course's build file for 'final' (version 1)" in main and "median of 2 timed runs" in main
    with docker_service.http() as h:
        measured = h.get(f"/api/v1/jobs/{job_id}").json()["results"]["measured"]
    assert measured["accuracy"] == 1.0 and measured["op_time"] > 0
    page.screenshot(path=str(ARTIFACTS / "job-done.png"), full_page=True)

    # leaderboard: the final run is ranked with the op time the service measured, not the printed
    # one; staff see real names and the CSV link
    page.goto(f"{docker_service.url}/leaderboard")
    text = page.inner_text("main")
    ranked = page.inner_text("table.board.ranked")
    assert f"{measured['op_time']:.6f} s" in ranked and "0.057900 s" not in ranked and "Download CSV" in text
    page.wait_for_selector("#dist")
    time.sleep(0.5)
    page.screenshot(path=str(ARTIFACTS / "leaderboard.png"), full_page=True)

    page.goto(f"{docker_service.url}/workers")
    assert "w1" in page.inner_text("main") and "alive" in page.inner_text("main")
    page.screenshot(path=str(ARTIFACTS / "workers.png"), full_page=True)
    page.close()
    assert csp_errors == [], "every page works under its Content Security Policy"


def test_student_sees_pseudonyms_and_no_workers_page(browser, docker_service, tmp_path):
    bob = docker_service.add_user("bob_w", team="bobs")
    proj = make_project(tmp_path / "p", ["sh -c 'echo Op Time: 0.5; echo Correctness: 0.95 Model: ece408'"])
    res = docker_service.client("submit", "-p", str(proj), env={"RAI_PROFILE": str(bob)})
    assert res.returncode == 0
    page = login(browser, docker_service, bob)
    page.goto(f"{docker_service.url}/leaderboard")
    mine = page.inner_text("table.board.unverified tr.mine")
    assert "bobs" in mine and "-->" not in mine  # own row (a dev run: shown apart, unranked): real name, the row marked (no terminal arrow)
    ranked = page.inner_text("table.board.ranked")
    assert "admin" not in ranked and "team-" in ranked  # others: stable pseudonyms
    page.screenshot(path=str(ARTIFACTS / "leaderboard-student.png"), full_page=True)
    # a finished job's page: its whole log, nothing left to follow
    job_id = next(line.split()[2] for line in res.stdout.splitlines() if " queued on " in line)
    page.goto(f"{docker_service.url}/jobs/{job_id}")
    page.locator("#log .l-out").first.wait_for(timeout=20000)
    assert page.locator("#follow").count() == 0 and "follow" not in page.inner_text(".log-tools")
    resp = page.goto(f"{docker_service.url}/workers")
    assert resp.status == 403
    page.close()


def test_errors_a_student_meets_are_pages_with_a_way_back(browser, docker_service):
    """Issue 26: /workers as a student, an unknown job and an unknown page showed raw JSON."""
    carla = docker_service.add_user("carla_w")
    page = login(browser, docker_service, carla)
    for path, status, words in (
        ("/workers", 403, "the workers page is for staff"),
        ("/jobs/01NOSUCHJOB0000000000000000", 404, "no job 01NOSUCHJOB0000000000000000"),
        ("/no-such-page", 404, "There is no page at /no-such-page."),
    ):
        resp = page.goto(f"{docker_service.url}{path}")
        assert resp.status == status and "text/html" in resp.headers["content-type"], path
        main = page.inner_text("main")
        assert words in main and "Back to the queue" in main, (path, main)
        assert page.inner_text("header nav")  # the same header as every page
    page.screenshot(path=str(ARTIFACTS / "error-page.png"), full_page=True)
    page.close()
    import httpx

    with docker_service.http(carla) as h:  # the API keeps JSON, whatever the client accepts
        r = h.get("/api/v1/jobs/01NOSUCHJOB0000000000000000", headers={"Accept": "text/html"})
        assert r.status_code == 404 and r.json()["detail"].startswith("no job")
    assert httpx.get(f"{docker_service.url}/nope").json() == {"detail": "Not Found"}  # no browser: JSON
