"""Issue 37, the web view on every window and what a student and a TA look for on it, in real
headless Chromium: no page wider than a 400 px window; the failed command and its exit code; a
timeline that grows while the job runs; the log's line numbers, links to a line, times, folds,
search and download; the staff's users list; Cancel that asks first; one cut of a job id; the tab
title and the notification when a job ends. Screenshots of every page at 400, 800 and 1400 px land
in $RAI_SHOTS (tests/artifacts/layout by default) for a person to look at."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest
from helpers import make_project, start_service, wait_for
from helpers.ranked import HONEST_SH, IMAGE, IN_IMAGE, ensure_course_image, offer_course_image
from test_web import CHROMIUM, REQUIRE_BROWSER  # the browser fixture is conftest.py's

SHOTS = Path(os.environ.get("RAI_SHOTS") or Path(__file__).parent / "artifacts" / "layout")
WIDTHS = (400, 800, 1400)
JOB_ID = re.compile(r"\b[0-9A-HJKMNP-TV-Z]{26}\b")
pytestmark = [pytest.mark.timeout(600), pytest.mark.skipif(CHROMIUM is None and not REQUIRE_BROWSER, reason="chromium not installed")]


def submit(svc, profile: Path, proj: Path, *args: str) -> str:
    """Submit and wait for the end; the job's id."""
    res = svc.client("submit", "-p", str(proj), *args, env={"RAI_PROFILE": str(profile)})
    found = JOB_ID.search(res.stdout)
    assert found, res.stdout + res.stderr
    return found.group(0)


def detach(svc, profile: Path, proj: Path) -> str:
    """Submit without waiting; the job's id."""
    res = svc.client("submit", "-d", "-p", str(proj), env={"RAI_PROFILE": str(profile)})
    found = JOB_ID.search(res.stdout)
    assert found, res.stdout + res.stderr
    return found.group(0)


def start(svc, profile: Path, proj: Path) -> str:
    """Submit without waiting; the job's id once it runs."""
    job_id = detach(svc, profile, proj)
    with svc.http() as h:
        wait_for(lambda: h.get(f"/api/v1/jobs/{job_id}").json()["state"] == "running", 60, what=f"{job_id} running")
    return job_id


@pytest.fixture(scope="module")
def layout_service(tmp_path_factory, redis_url, docker_engine):
    """The service with a worker of its own name: workers of other test runs on this Docker engine
    (w1, w2) remove the containers labelled with their name, which killed this module's long job."""
    # dana's jobs here (her runs, staff's re-runs of them) come faster than a student's five a minute:
    # the limits have their own tests (test_quotas, test_limits)
    svc = start_service(
        tmp_path_factory.mktemp("svc-layout"), redis_url, None, "docker", worker=False, extra_env={"RAI_SUBMISSIONS_PER_MINUTE": "1000"}
    )
    svc.start_worker("wlayout")
    yield svc
    svc.shutdown()


@pytest.fixture(scope="module")
def site(layout_service, tmp_path_factory):
    """A course in the middle of things: a ranked run, a failed run and a long run going on."""
    svc, tmp = layout_service, tmp_path_factory.mktemp("site")
    staff = svc.add_user("tara_ta", role="ta")
    dana = svc.add_user("dana_l", team="dbs")
    course = tmp / "final.yml"
    import docker

    engine = docker.from_env(timeout=30)
    ensure_course_image(engine, tmp / "image")
    offer_course_image(svc, engine, worker="wlayout")
    course.write_text(
        f"rai: {{version: 0.2, image: {IMAGE}}}\ncommands:\n  build:\n    - echo compiling the course build\n"
        "    - cp /src/solution.sh /build/\n"
        f"ranked: {{student_files: [solution.sh], timed: sh ./solution.sh, reference: {IN_IMAGE}/ref, repeats: 2}}\n"
    )
    res = svc.client("admin", "course", "install", "final", str(course))
    assert res.returncode == 0, res.stdout + res.stderr
    ranked = submit(
        svc,
        dana,
        make_project(
            tmp / "ranked",
            ["echo unused"],
            files={
                "report.pdf": "%PDF-1.4 report",
                "solution.sh": f"echo Op Time: 0.0123; echo Correctness: 0.91 Model: ece408; {HONEST_SH}",
            },
        ),
        "--kind",
        "final",
    )
    submit(svc, svc.profile, tmp / "ranked", "--kind", "final")  # the admin's reference run
    failed = submit(
        svc,
        dana,
        make_project(
            tmp / "failed",
            [
                "echo compiling",
                "sh -c 'for i in 1 2 3 4 5; do echo step $i; done'",
                "sh -c 'echo the needle is here; echo boom >&2; exit 3'",
                "echo never reached",
            ],
        ),
    )
    running = start(
        svc, dana, make_project(tmp / "running", ["echo warming up", "sh -c 'for i in $(seq 1 600); do echo tick $i; sleep 0.5; done'"])
    )
    yield {"svc": svc, "staff": staff, "dana": dana, "ranked": ranked, "failed": failed, "running": running, "tmp": tmp}


def log_in(browser, svc, profile: Path, width: int, **context):
    from raiprotocol.profile import read_profile_file

    p = read_profile_file(profile)
    page = browser.new_context(viewport={"width": width, "height": 900}, **context).new_page()
    page.goto(f"{svc.url}/login")
    page.fill("input[name=access_key]", p.access_key)
    page.fill("input[name=secret_key]", p.secret_key)
    page.click("button[type=submit]")
    page.wait_for_url("**/queue")
    return page


def width_of(page) -> int:
    return page.evaluate("document.documentElement.scrollWidth")


def test_no_page_is_wider_than_the_window(browser, site):
    """At 400 px the tables spilled out of their cards, pages were 660-920 px wide, 'Log out' fell
    off the header and the queue's Cancel button was off screen."""
    svc = site["svc"]
    SHOTS.mkdir(parents=True, exist_ok=True)
    pages = [
        ("queue", "/queue", f"#running a[href='/jobs/{site['running']}']"),
        ("workers", "/workers", "text=alive"),
        ("job-live", f"/jobs/{site['running']}", "#log .l-out >> nth=3"),
        ("job-failed", f"/jobs/{site['failed']}", "#log .l-err"),
        ("job-ranked", f"/jobs/{site['ranked']}", "#measured"),
        ("leaderboard", "/leaderboard", "#dist"),
        ("student", "/users/dana_l", "#history"),
        ("users", "/users", "#users"),
        ("error", "/no-such-page", "text=There is no page"),
    ]
    # a full queue for the while: the other slots held, two jobs waiting, dana's behind a later one
    hold = [start(svc, svc.add_user(name), make_project(site["tmp"] / name, ["sleep 300"])) for name in ("eve_l", "fred_l", "gina_l")]
    waiting = detach(svc, site["dana"], make_project(site["tmp"] / "wait", ["echo waited"]))
    time.sleep(1.1)  # submitted later
    hal = detach(svc, svc.add_user("hal_l"), make_project(site["tmp"] / "hal", ["echo hal"]))
    with svc.http() as h:
        dana_job = h.get(f"/api/v1/jobs/{waiting}").json()
        assert h.get(f"/api/v1/jobs/{hal}").json()["position"] == 1  # hal never ran a job: his turn first
    assert dana_job["position"] == 2 and dana_job["eta_seconds"] is not None, dana_job
    assert dana_job["position_why"].startswith("1 job submitted after yours goes first"), dana_job
    pages.insert(3, ("job-waiting", f"/jobs/{waiting}", "#position-why"))
    said = svc.client("status", waiting, env={"RAI_PROFILE": str(site["dana"]), "COLUMNS": "200"}).stdout
    assert "starts in " in said and "1 job submitted after yours goes first" in said, said  # a range, or a guess that says so (issue 49)
    wide: list[str] = []
    for w in WIDTHS:
        page = log_in(browser, svc, site["staff"], w)
        for name, path, ready in pages:
            page.goto(f"{svc.url}{path}")
            page.locator(ready).first.wait_for(timeout=20000)
            time.sleep(0.3)  # charts draw
            if width_of(page) > w:
                wide.append(f"{name} at {w}: {width_of(page)} px")
            if w == 1400:  # a wide window: every table fits its card (the leaderboard's flags pushed them out)
                spilled = page.evaluate(
                    "[...document.querySelectorAll('.card')].filter((c) => c.scrollWidth > c.clientWidth + 1)"
                    ".map((c) => c.id || c.className)"
                )
                wide += [f"{name} at {w}: a table wider than its card ({c})" for c in spilled]
            page.screenshot(path=str(SHOTS / f"{name}-{w}.png"), full_page=True)
            if name == "job-waiting":  # the ETA and why jobs submitted later go first
                assert "starts in " in page.inner_text("#position")
                assert "1 job submitted after yours goes first" in page.inner_text("#position-why")
            if w == 400:  # what users missed: 'Log out', and the queue's Cancel button
                header = page.locator("header").bounding_box()  # the links folded behind the menu button (issue 49: ~170 px)
                assert header and header["height"] <= 60, (name, header)
                page.click("#menu")
                out = page.locator("header .who button").bounding_box()
                assert out and out["x"] + out["width"] <= w, (name, out)
                page.click("#menu")
                if name == "queue":
                    cancel = page.locator(f"#running tr:has(a[href='/jobs/{site['running']}']) button.danger").bounding_box()
                    assert cancel and cancel["x"] + cancel["width"] <= w, cancel
        page.context.close()
        anon = browser.new_context(viewport={"width": w, "height": 900}).new_page()
        anon.goto(f"{svc.url}/login")
        if width_of(anon) > w:
            wide.append(f"login at {w}: {width_of(anon)} px")
        anon.screenshot(path=str(SHOTS / f"login-{w}.png"), full_page=True)
        anon.context.close()
    # a position that drops says why, live: ivan never had a job run, so his goes before dana's
    page = log_in(browser, svc, site["dana"], 1280)
    page.goto(f"{svc.url}/jobs/{waiting}")
    assert page.inner_text("#position").startswith(" · position 2")
    ivan = detach(svc, svc.add_user("ivan_l"), make_project(site["tmp"] / "ivan", ["echo ivan"]))
    page.locator("#position-why").filter(has_text="Moved back from 2 to 3. 2 jobs submitted after yours go first").wait_for(timeout=20000)
    assert page.inner_text("#position").startswith(" · position 3 · starts in ")
    page.context.close()
    with svc.http() as h:  # the queue is free again for the other tests
        for job in (*hold, waiting, hal, ivan):
            h.post(f"/api/v1/jobs/{job}/cancel")
    assert wide == [], "pages wider than the window"


def test_a_student_lands_on_the_queue_with_their_latest_finished_jobs(browser, site):
    """A login lands on the queue, an empty table most of the day: a student sees their latest
    finished jobs above it (a friction noted by a new user); what runs or waits stays in the live
    tables, never in the card (drawn once, it would go stale). Staff see the queue alone."""
    svc = site["svc"]
    SHOTS.mkdir(parents=True, exist_ok=True)
    page = log_in(browser, svc, site["dana"], 1280)
    card = page.locator("#mine")
    assert "Your latest finished jobs" in card.inner_text()
    for finished in (site["failed"], site["ranked"]):
        assert card.locator(f"a[href='/jobs/{finished}']").count() == 1, card.inner_text()
    assert card.locator(f"a[href='/jobs/{site['running']}']").count() == 0, "a running job in the card"
    page.locator(f"#running a[href='/jobs/{site['running']}']").first.wait_for(timeout=20000)  # it is in the live table
    assert "failed" in card.inner_text() and card.locator("a[href='/users/dana_l']").count() == 1
    page.screenshot(path=str(SHOTS / "queue-student-1280.png"), full_page=True)
    staff = log_in(browser, svc, site["staff"], 1280)
    assert staff.locator("#mine").count() == 0
    page.context.close()
    staff.context.close()


def test_a_failed_job_says_which_command_failed_and_links_to_it_in_the_log(browser, site):
    svc, job = site["svc"], site["failed"]
    page = log_in(browser, svc, site["dana"], 1280)
    page.goto(f"{svc.url}/jobs/{job}")
    outcome = page.locator("#outcome")
    assert "the command sh -c 'echo the needle is here; echo boom >&2; exit 3' exited with code 3" in outcome.inner_text()
    assert page.title().startswith("failed · Job ")
    jump = page.locator("#failed-jump")
    jump.wait_for(state="visible", timeout=20000)
    jump.click()
    target = page.locator("#log .target")
    target.wait_for(timeout=5000)
    assert "✱ Running: sh -c 'echo the needle" in target.inner_text()
    assert page.locator("#log details.fold.failed").count() == 1  # only the command that failed is marked
    # the owner links to the student's page
    assert page.locator("#owner").get_attribute("href") == "/users/dana_l"
    page.context.close()


def test_a_jobs_page_says_when_it_started_where_it_ranks_now_and_staff_run_it_again(browser, site):
    """Issue 49: a running job's page showed no start or elapsed time; a ranked job's page kept
    "Ranked #1 of 1" after the board changed; staff had no way to run a job again."""
    svc = site["svc"]
    SHOTS.mkdir(parents=True, exist_ok=True)
    for w in (1400, 400):
        page = log_in(browser, svc, site["staff"], w)
        page.goto(f"{svc.url}/jobs/{site['running']}")
        started = page.inner_text("#started")
        assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC · running for \d+ (s|min)", started), started
        before = page.inner_text("#elapsed")
        page.locator("#elapsed").filter(has_not_text=before).wait_for(timeout=5000)  # it counts on
        page.screenshot(path=str(SHOTS / f"job-started-{w}.png"), full_page=False)
        assert page.locator("#rerun").count() == 0  # running: nothing to run again yet
        page.context.close()

    # dana's run was told "Ranked #1 of 1" at its end; the admin's run ranked after it: the page says the board now
    page = log_in(browser, svc, site["dana"], 1400)
    page.goto(f"{svc.url}/jobs/{site['ranked']}")
    verdict = page.inner_text("#verdict")
    assert re.match(r"Ranked #[12] of 2: ", verdict) and "at this run's end: Ranked #1 of 1" in verdict, verdict
    assert page.locator("#rerun").count() == 0  # students do not re-run
    page.screenshot(path=str(SHOTS / "job-ranked-now-1400.png"), full_page=False)
    page.context.close()

    # staff run dana's failed job again from its page: a new job of hers, the same files, audited
    page = log_in(browser, svc, site["staff"], 1400)
    page.goto(f"{svc.url}/jobs/{site['failed']}")
    asked: list[str] = []
    page.once("dialog", lambda d: (asked.append(d.message), d.accept()))
    page.click("#rerun button")
    page.wait_for_url(re.compile(r".*/jobs/(?!" + site["failed"] + r")\w{26}$"))
    again = page.url.rsplit("/", 1)[1]
    assert asked == [f"Run job {site['failed'][-8:]} of dana_l again? A new job of dana_l's, from the same files and build file; audited."]
    page.locator("#log").filter(has_text=f"A re-run of job {site['failed']}, asked for by tara_ta").wait_for(timeout=30000)
    page.screenshot(path=str(SHOTS / "job-rerun-1400.png"), full_page=False)
    with svc.http() as h:
        wait_for(lambda: h.get(f"/api/v1/jobs/{again}").json()["state"] == "failed", 60, what="the re-run ends")
        job = h.get(f"/api/v1/jobs/{again}").json()
        entry = h.get("/api/v1/admin/audit", params={"action": "job.rerun"}).json()[0]
    assert job["owner"] == "dana_l" and job["kind"] == "dev" and job["failed_command"].startswith("sh -c 'echo the needle"), job
    assert (entry["actor"], entry["target"], entry["detail"]["new_job"]) == ("tara_ta", site["failed"], again), entry
    page.context.close()
    res = svc.client("admin", "rerun", site["failed"][:10], env={"RAI_PROFILE": str(site["staff"])})
    by_cli = re.search(rf"job (\w{{26}}) runs dana_l's job {site['failed'][:10]} again \('dev'\)", res.stdout)
    assert res.returncode == 0 and by_cli, res
    with svc.http() as h:  # done with it: dana's later tests may have two jobs waiting at once
        h.post(f"/api/v1/jobs/{by_cli.group(1)}/cancel")
    res = svc.client("admin", "audit", "--action", "job.rerun", "--actor", "tara_ta", env={"COLUMNS": "200"})
    print(res.stdout)
    assert len(res.stdout.splitlines()) == 3 and all(site["failed"] in line for line in res.stdout.splitlines()[1:]), res.stdout
    with svc.http(site["dana"]) as h:
        refused = h.post(f"/api/v1/admin/jobs/{site['failed']}/rerun")
    assert refused.status_code == 403, refused.text

    # a re-measure of dana's ranked run: the notices are information, not the error's red
    res = svc.client("admin", "remeasure", site["ranked"], "--repeats", "2", env={"RAI_PROFILE": str(site["staff"])})
    assert res.returncode == 0, res.stdout + res.stderr
    redo = re.search(r"job (\w{26}) measures", res.stdout).group(1)
    page = log_in(browser, svc, site["dana"], 1400)
    page.goto(f"{svc.url}/jobs/{site['ranked']}")
    note = page.locator("#remeasure-note")
    said = note.inner_text()
    assert re.search(rf"Being measured again: job {redo} \((queued|running)\); its result replaces this run's", said), said
    colour = note.evaluate("e => getComputedStyle(e).backgroundColor")
    assert colour == "rgb(239, 246, 255)", colour  # the notice's light blue; the failure banner's is rgb(254, 226, 226)
    page.screenshot(path=str(SHOTS / "job-remeasuring-1400.png"), full_page=False)
    page.context.close()
    with svc.http() as h:  # done with it
        h.post(f"/api/v1/jobs/{redo}/cancel")


def test_the_log_has_line_numbers_times_links_folds_search_and_a_download(browser, site):
    svc, job = site["svc"], site["failed"]
    page = log_in(browser, svc, site["dana"], 1280)
    page.goto(f"{svc.url}/jobs/{job}#L7")
    page.locator("#log .l-err").wait_for(timeout=20000)
    # a link to a line: it is marked and in view
    target = page.locator("#log .target")
    assert target.get_attribute("id") == "L7" and target.locator(".ln").inner_text() == "7"
    assert target.is_visible()
    # times (UTC) beside each line, and the option to hide them
    assert re.fullmatch(r"\d\d:\d\d:\d\d", page.locator("#L7 .lt").inner_text())
    page.uncheck("#log-times")
    assert not page.locator("#L7 .lt").is_visible()
    # one fold per build command, with its lines and time; folding one hides its lines
    folds = page.locator("#log details.fold")
    assert folds.count() == 3  # the fourth command never ran
    second = folds.nth(1)
    assert second.locator(".fold-info").inner_text().startswith("5 lines · ")
    step = second.locator("text=step 3")
    assert step.is_visible()
    second.locator("summary .lx").click()
    assert not step.is_visible()
    # search: the matching line marked and counted, and unfolded
    page.fill("#log-search", "STEP 3")
    page.locator("#log-hits").filter(has_text="1 of 1").wait_for(timeout=5000)
    assert step.is_visible() and "hit" in (page.locator("#log .hit").get_attribute("class") or "")
    page.fill("#log-search", "no such text anywhere")
    page.locator("#log-hits").filter(has_text="no match").wait_for(timeout=5000)
    # the whole log as a file
    href = page.locator("#log-download").get_attribute("href")
    r = page.request.get(f"{svc.url}{href}")
    assert r.status == 200 and "boom" in r.text() and "✱ Running: echo compiling" in r.text()
    page.context.close()


def test_a_running_jobs_timeline_grows_and_its_tab_says_when_it_ends(browser, site, tmp_path):
    svc = site["svc"]
    page = log_in(browser, svc, site["dana"], 1280)
    job = start(
        svc, site["dana"], make_project(tmp_path / "p", ["echo first", "sh -c 'sleep 2; echo second'", "sh -c 'sleep 2; echo third'"])
    )
    # the real Notification, with each one shown noted where the test can read it after the reload
    page.context.add_init_script("""
        if (window.Notification) {
          const Shown = window.Notification;
          window.Notification = class extends Shown {
            constructor(title, options) { sessionStorage.setItem("rai-notified", title); super(title, options); }
          };
        }""")
    page.goto(f"{svc.url}/jobs/{job}")
    assert page.title().startswith("running · Job ")
    # the notification, asked for (Chromium here answers for the person: granted)
    page.context.grant_permissions(["notifications"], origin=svc.url)
    bell = page.locator("#notify")
    bell.click()
    page.locator("#notify").filter(has_text="You will be notified").wait_for(timeout=5000)
    # commands show up in the timeline as they start, before the job ends
    rows = page.locator("#timeline-rows tr")
    page.locator("#timeline-rows tr:has-text('sleep 2; echo third')").wait_for(timeout=30000)
    assert page.locator("#timeline-rows tr:has-text('command started')").count() >= 2
    assert rows.count() >= 5
    for _ in range(300):
        if page.title().startswith("succeeded · Job "):
            break
        time.sleep(0.1)
    assert page.title().startswith("succeeded · Job ")
    assert page.evaluate("sessionStorage.getItem('rai-notified')") == f"Job {job[-8:]} succeeded"
    page.context.close()


def test_staff_find_people_and_students_cannot(browser, site):
    svc = site["svc"]
    page = log_in(browser, svc, site["staff"], 1280)
    page.click("header nav >> text=Users")
    page.wait_for_url("**/users")
    page.fill("input[name=q]", "DBS")  # any part of a name, email or team, any case
    page.click("form.search button")
    rows = page.locator("#users tbody tr")
    assert rows.count() == 1
    row = rows.first.inner_text()
    assert "dana_l" in row and "dbs" in row and "student" in row
    jobs = int(rows.first.locator("td.num").inner_text())
    rows.first.locator("a").click()
    page.wait_for_url("**/users/dana_l")
    assert jobs >= 3 and page.locator("main table tbody tr").count() == jobs  # the count is her jobs
    page.goto(f"{svc.url}/users?q=%25")  # '%' is a character, not a wildcard
    assert "Nobody matches." in page.inner_text("#users")
    page.goto(f"{svc.url}/users?role=ta")
    assert page.locator("#users tbody tr").count() == 1 and "tara_ta" in page.inner_text("#users")
    page.context.close()
    student = log_in(browser, svc, site["dana"], 1280)
    assert "Users" not in student.inner_text("header nav")
    assert student.goto(f"{svc.url}/users").status == 403
    student.context.close()


def test_cancel_asks_first_and_job_ids_are_cut_the_same_everywhere(browser, site):
    svc, job = site["svc"], site["running"]
    page = log_in(browser, svc, site["staff"], 1280)
    page.locator(f"#running a[href='/jobs/{job}']").wait_for(timeout=20000)
    shown = page.locator(f"#running a[href='/jobs/{job}'] code").inner_text()
    page.goto(f"{svc.url}/workers")
    assert page.locator(f"a[href='/jobs/{job}'] code").inner_text() == shown == job[-8:]
    page.goto(f"{svc.url}/users/dana_l")
    assert page.locator(f"a[href='/jobs/{job}'] code").inner_text() == shown
    page.goto(f"{svc.url}/queue")
    asked: list[str] = []

    def answer(dialog, accept: bool) -> None:
        asked.append(dialog.message)
        dialog.accept() if accept else dialog.dismiss()

    page.once("dialog", lambda d: answer(d, False))
    page.locator(f"#running tr:has(a[href='/jobs/{job}']) button.danger").click()
    time.sleep(1.5)
    with svc.http() as h:
        assert h.get(f"/api/v1/jobs/{job}").json()["state"] == "running"  # said no: still running
    assert asked == [f"Cancel job {shown} of dana_l?"]
    page.once("dialog", lambda d: answer(d, True))
    page.locator(f"#running tr:has(a[href='/jobs/{job}']) button.danger").click()
    with svc.http() as h:
        wait_for(lambda: h.get(f"/api/v1/jobs/{job}").json()["state"] == "cancelled", 30, what="cancelled")
    page.context.close()


def test_staff_runs_on_the_leaderboard_are_marked_as_staff_not_shown_as_a_team(browser, site):
    svc = site["svc"]
    page = log_in(browser, svc, site["staff"], 1400)
    page.goto(f"{svc.url}/leaderboard")
    rows = page.locator("table.board.ranked tbody tr")
    assert rows.count() == 2
    admin = page.locator("table.board.ranked tbody tr:has-text('admin')")
    assert admin.locator(".pill.staff").inner_text() == "staff"
    dana = page.locator("table.board.ranked tbody tr:has-text('dbs')")
    assert dana.locator(".pill.staff").count() == 0 and "(dana_l)" in dana.inner_text()
    page.context.close()
