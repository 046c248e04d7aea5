"""Running a term (issue 36): kinds with openings, deadlines and late policies in the database,
extensions, late days, and what students see of them, on PostgreSQL with the real client."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from helpers import Service, fresh_pg, make_project, start_service
from test_web import login

pytestmark = pytest.mark.timeout(300)


LATE_JOB: list[str] = []  # bob's late 'dev' run, for the web test
LIMITS = {
    "RAI_MAX_ACTIVE_JOBS": "50",
    "RAI_SUBMISSIONS_PER_MINUTE": "100",
    "RAI_LATE_DAYS": "2",
    "RAI_KINDS": "dev,m1,m2,m3,final",
    "RAI_DEADLINE": "2020-01-01T00:00:00Z",
}


@pytest.fixture(scope="module")
def term(tmp_path_factory, redis_url) -> Iterator[Service]:
    gen = fresh_pg()
    url = next(gen)
    svc = start_service(tmp_path_factory.mktemp("term"), redis_url, url, "process", worker=False, extra_env=LIMITS)
    try:
        yield svc
    finally:
        svc.shutdown()
        next(gen, None)


def iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def student(svc: Service, name: str, team: str | None = None) -> dict[str, str]:
    return {"RAI_PROFILE": str(svc.add_user(name, "student", team))}


def test_the_upgrade_keeps_rai_deadline_and_rai_kinds(term):
    res = term.client("admin", "kinds", "show")
    assert res.returncode == 0, res.stderr
    lines = res.stdout
    for name in ("dev", "m1", "m2", "m3", "final"):
        assert any(line.startswith(f"{name} ") for line in lines.splitlines())
    final = next(line for line in lines.splitlines() if line.startswith("final "))
    assert "2020-01-01 00:00 UTC" in final and "accepted, marked late" in final


def test_a_database_of_release_0012_upgrades_keeping_rai_deadline(tmp_path, redis_url):
    """The upgrade to 0013 seeds the kinds from RAI_KINDS and RAI_DEADLINE: the old 'final' run made
    before the deadline still shows, the one after it still does not, and a new late one is kept, marked."""
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import create_engine, text

    from raiserver.access.auth import hash_secret
    from raiserver.store.db import HERE

    gen = fresh_pg()
    url = next(gen)
    engine = create_engine(url)
    cfg = Config()
    cfg.set_main_option("script_location", str(HERE / "migrations"))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0012")
        conn.execute(
            text(
                "INSERT INTO users (id, username, role, access_key, secret_hash, active, created_at) VALUES "
                "(100, 'old_student', 'student', 'oldkey', :h, true, now())"
            ),
            {"h": hash_secret("oldsecret")},
        )
        for job_id, created, op in (
            ("01JOLDJOBOLDJOBOLDJOBONTIME", "2025-12-01T00:00:00Z", 0.5),
            ("01JOLDJOBOLDJOBOLDJOBOBLATE", "2026-01-02T00:00:00Z", 0.1),
        ):
            conn.execute(
                text(
                    "INSERT INTO jobs (id, owner_id, queue, kind, state, image, spec_yaml, archive_sha256, archive_bytes, gpu_count, "
                    "created_at, finished_at, attempt, cancel_requested, has_build, results) VALUES "
                    "(:id, 100, 'gpu', 'final', 'succeeded', 'rai/busybox:latest', 'x', 'abc', 10, 0, :c, :c, 1, false, false, :r)"
                ),
                {"id": job_id[:26], "c": created, "r": f'{{"op_times": [{op}], "op_time_total": {op}, "correctness": {{"m": 0.9}}}}'},
            )
    engine.dispose()
    env = {"RAI_KINDS": "dev,lab1,final", "RAI_DEADLINE": "2026-01-01T00:00:00Z"}
    svc = start_service(tmp_path / "svc", redis_url, url, "process", worker=False, extra_env=env)
    try:
        with svc.http() as h:
            kinds = {k["name"]: k for k in h.get("/api/v1/kinds").json()["kinds"]}
            board = h.get("/api/v1/leaderboard", params={"board": "unverified"}).json()
        assert sorted(kinds) == ["dev", "final", "lab1"]
        assert kinds["final"]["due_at"].startswith("2026-01-01T00:00:00") and kinds["final"]["late_policy"] == "mark"
        assert kinds["lab1"]["due_at"] is None
        assert [e["op_time"] for e in board] == [0.5]  # the run after RAI_DEADLINE still does not rank
        # the student's own deadline decides: with an extension past it, the later (faster) run ranks
        res = svc.client("admin", "kinds", "extend", "final", "--student", "old_student", "--until", "2026-01-03T00:00Z")
        assert res.returncode == 0, res.stderr
        with svc.http() as h:
            board = h.get("/api/v1/leaderboard", params={"board": "unverified"}).json()
        assert [e["op_time"] for e in board] == [0.1]
        proj = make_project(tmp_path / "p", ["true"], files={"report.pdf": "%PDF"})
        res = svc.client("submit", "-d", "-p", str(proj), "--kind", "final")
        assert res.returncode == 0 and "this submission is marked late" in res.stdout, res.stderr
        res = svc.client("submit", "-d", "-p", str(proj), "--kind", "m1")
        assert "this course has no submission kind 'm1'; it has: dev, final, lab1" in res.stderr
    finally:
        svc.shutdown()
        next(gen, None)


def test_openings_deadlines_policies_and_what_students_see(term, tmp_path):
    now = datetime.now(timezone.utc)
    proj = make_project(tmp_path / "p", ["true"])
    alice = student(term, "alice")

    # not open yet: refused, naming when it opens
    assert (
        term.client(
            "admin",
            "kinds",
            "set",
            "m1",
            "--opens",
            iso(now + timedelta(days=2, hours=3, minutes=30)),
            "--due",
            iso(now + timedelta(days=9)),
        ).returncode
        == 0
    )
    res = term.client("submit", "-p", str(proj), "--kind", "m1", env=alice)
    assert res.returncode != 0 and "'m1' opens at " in res.stderr and "(in 2 d 3 h)" in res.stderr, res.stderr

    # open and due soon: submit says when
    assert term.client("admin", "kinds", "set", "m2", "--due", iso(now + timedelta(hours=2, minutes=13, seconds=40))).returncode == 0
    res = term.client("submit", "-d", "-p", str(proj), "--kind", "m2", env=alice)
    assert res.returncode == 0, res.stderr
    assert "m2 is due in 2 h 13 min" in res.stdout

    # past the deadline, policy refuse: one clear refusal, then an extension lets alice in (only her)
    assert term.client("admin", "kinds", "set", "m3", "--due", iso(now - timedelta(hours=1)), "--late-policy", "refuse").returncode == 0
    res = term.client("submit", "-d", "-p", str(proj), "--kind", "m3", env=alice)
    assert res.returncode != 0 and "'m3' was due at" in res.stderr and "late submissions are not accepted" in res.stderr
    res = term.client("admin", "kinds", "extend", "m3", "--student", "alice", "--hours", "49", "--reason", "illness")
    assert res.returncode == 0 and "'m3' is due for alice at" in res.stdout, res.stderr
    res = term.client("submit", "-d", "-p", str(proj), "--kind", "m3", env=alice)
    assert res.returncode == 0 and "m3 is due in 1 d 23 h" in res.stdout, res.stdout + res.stderr
    bob = student(term, "bob")
    assert term.client("submit", "-d", "-p", str(proj), "--kind", "m3", env=bob).returncode != 0

    # late days: an hour late draws one of alice's two; `raiclient kinds` shows what is left
    assert (
        term.client(
            "admin", "kinds", "set", "final", "--due", iso(now - timedelta(hours=1)), "--late-policy", "days", "--late-hours", "72"
        ).returncode
        == 0
    )
    res = term.client("submit", "-d", "-p", str(proj), "--kind", "final", env=alice)
    assert res.returncode != 0 and "report.pdf" in res.stderr  # the kind's files are still required
    final = make_project(tmp_path / "f", ["true"], files={"report.pdf": "%PDF"})
    res = term.client("submit", "-d", "-p", str(final), "--kind", "final", env=alice)
    assert res.returncode == 0, res.stderr
    assert "this submission is late; 1 late day(s) drawn, 1 left" in res.stdout
    res = term.client("kinds", env=alice)
    assert res.returncode == 0, res.stderr
    assert "Late days: 1 left of 2" in res.stdout
    m3 = row_of(res.stdout, "m3")
    assert "(extended)" in m3 and "due in 1 d 23 h" in m3
    assert "opens in 2 d 3 h" in next(line for line in res.stdout.splitlines() if line.startswith("m1 "))
    # a second late submission the same day draws nothing more
    res = term.client("submit", "-d", "-p", str(final), "--kind", "final", env=alice)
    assert res.returncode == 0 and "within the 1 late day(s) already drawn" in res.stdout, res.stdout

    # the late window's end
    assert (
        term.client(
            "admin", "kinds", "set", "dev", "--due", iso(now - timedelta(hours=3)), "--late-policy", "mark", "--late-hours", "1"
        ).returncode
        == 0
    )
    res = term.client("submit", "-d", "-p", str(proj), "--kind", "dev", env=bob)
    assert res.returncode != 0 and "its late window closed 2 h ago" in res.stderr, res.stderr
    assert term.client("admin", "kinds", "set", "dev", "--late-hours", "0").returncode == 0  # no end: marked late
    res = term.client("submit", "-d", "-p", str(proj), "--kind", "dev", env=bob)
    assert res.returncode == 0 and "this submission is marked late" in res.stdout
    LATE_JOB.append(re.search(r"Job (\w{26}) queued", res.stdout).group(1))
    status = term.client("status", LATE_JOB[0], env=bob).stdout
    assert re.search(r"late\s+late by 3 h", status), status
    history = term.client("history", "-n", "1", env=alice).stdout.split()
    status = term.client("status", history[history.index("final") - 2], env=alice).stdout
    assert re.search(r"late\s+late by 1 h( \d+ min)? \(late days\)", status), status

    audit = term.client("admin", "audit", "-n", "50").stdout
    assert "kind.change" in audit and "kind.extend" in audit


def row_of(text: str, name: str) -> str:
    """A kind's row of ``raiclient kinds``: its line and the lines its cells wrapped onto, as one."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{name} "))
    rest = lines[start + 1 :]
    more = next((i for i, line in enumerate(rest) if not line.startswith(" ")), len(rest))
    return " ".join(line.strip() for line in lines[start : start + 1 + more])


def kinds_now(svc: Service) -> list[dict]:
    """The kinds as stored (without the status, which moves with the clock), and every extension."""
    with svc.http() as h:
        kinds = [{k: v for k, v in kind.items() if k != "status"} for kind in h.get("/api/v1/kinds").json()["kinds"]]
        return kinds + [h.get(f"/api/v1/admin/kinds/{k['name']}/extensions").json() for k in kinds]


def test_bad_input_gets_one_line_and_changes_nothing(term):
    before = kinds_now(term)
    cases = [
        (
            ["set", "m1", "--opens", "2026-05-02T00:00Z", "--due", "2026-05-01T00:00Z"],
            "'m1' would be due (2026-05-01 00:00 UTC) before it opens (2026-05-02 00:00 UTC)",
        ),
        (["set", "m1", "--due", "next friday"], "--due: 'next friday' is not a date"),
        (["set", "m1", "--due", "9999-12-31T23:59Z"], "--due: '9999-12-31T23:59Z' is not a date of a term"),
        (["set", "m1", "--late-policy", "sometimes"], "--late-policy"),
        (["set", "m1", "--late-policy", "refuse", "--late-hours", "5"], "needs the late policy 'mark' or 'days'"),
        (["set", "m1", "--grade", "linear", "--slow", "0.08", "--fast", "0.2"], "must be faster (smaller) than --slow"),
        (["set", "m1", "--grade", "linear"], "the linear rule needs --slow"),
        (["set", "Bad Name!", "--due", "2026-05-01T00:00Z"], "bad kind name"),
        (["extend", "m1", "--student", "nobody", "--hours", "5"], "no student 'nobody' on the roster"),
        (["extend", "m9", "--student", "alice", "--hours", "5"], "this course has no submission kind 'm9'"),
        (["extend", "m1", "--student", "alice"], "give the new deadline (--until) or how many hours"),
        (["extend", "m1", "--student", "alice", "--until", "2001-01-01T00:00Z"], "an extension must end after 'm1' is due"),
        (["unextend", "m3", "--student", "bob"], "no extension of 'm3' for bob"),
        (["unextend", "m3"], "name the student (--student) or the team (--team)"),
    ]
    for args, message in cases:
        res = term.client("admin", "kinds", *args)
        assert res.returncode != 0, args
        assert message in res.stderr, (args, res.stderr)
        assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert kinds_now(term) == before


def test_students_may_not_change_kinds(term):
    eve = student(term, "eve")
    res = term.client("admin", "kinds", "set", "final", "--due", "2030-01-01T00:00Z", env=eve)
    assert res.returncode != 0 and "staff only" in res.stderr


SHOTS = Path("/tmp/shots36a")


def test_kinds_page_for_instructors_and_students(browser, term):
    """Instructors set kinds and grant extensions on /kinds (audited); a refused form shows its one
    line and changes nothing; a student sees their own deadline and limits there."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    carol = student(term, "carol", team="t9")
    page = login(browser, term, term.profile)
    page.goto(f"{term.url}/kinds")
    before = page.inner_text("#kinds")
    page.fill("#set-kind input[name=name]", "m3")
    page.fill("#set-kind input[name=opens]", "2030-01-02T00:00")
    page.fill("#set-kind input[name=due]", "2030-01-01T00:00")
    page.click("#set-kind button")
    assert "'m3' would be due (2030-01-01 00:00 UTC) before it opens (2030-01-02 00:00 UTC)" in page.inner_text("#error")
    assert page.inner_text("#kinds") == before
    page.screenshot(path=str(SHOTS / "kinds-refused.png"), full_page=True)

    page.fill("#set-kind input[name=name]", "m4")
    page.fill("#set-kind input[name=opens]", "")
    page.fill("#set-kind input[name=due]", "2030-03-14T23:59")
    page.select_option("#set-kind select[name=late_policy]", "mark")
    page.fill("#set-kind input[name=late_hours]", "48")
    page.click("#set-kind button")
    page.wait_for_url("**/kinds")
    row = next(r for r in page.inner_text("#kinds").splitlines() if r.startswith("m4"))
    assert "2030-03-14 23:59 UTC" in row and "accepted, marked late for 48 h" in row
    page.fill("#set-kind input[name=name]", "m4")  # only the late policy: the rest stays as it is
    page.select_option("#set-kind select[name=late_policy]", "days")
    page.click("#set-kind button")
    page.wait_for_url("**/kinds")
    row = next(r for r in page.inner_text("#kinds").splitlines() if r.startswith("m4"))
    assert "2030-03-14 23:59 UTC" in row and "with late days for 48 h" in row
    page.fill("#extend input[name=kind]", "m4")
    page.fill("#extend input[name=who]", "team t9")
    page.fill("#extend input[name=hours]", "24")
    page.fill("#extend input[name=reason]", "server outage")
    page.click("#extend button")
    page.wait_for_url("**/kinds")
    assert "team t9" in page.inner_text("main") and "2030-03-15 23:59 UTC" in page.inner_text("main")
    page.screenshot(path=str(SHOTS / "kinds-instructor.png"), full_page=True)
    page.close()
    audit = term.client("admin", "audit", "-n", "5").stdout
    assert "kind.extend" in audit and "m4" in audit

    page = login(browser, term, term.profile)
    page.goto(f"{term.url}/jobs/{LATE_JOB[0]}")
    assert page.inner_text("#late").startswith("late by 3 h")
    page.screenshot(path=str(SHOTS / "job-late.png"), full_page=True)
    page.close()

    page = login(browser, term, Path(carol["RAI_PROFILE"]))
    page.goto(f"{term.url}/kinds")
    row = next(r for r in page.inner_text("#kinds").splitlines() if r.startswith("m4"))
    assert "2030-03-15 23:59 UTC" in row and "extended" in row
    assert "submissions left of 100" in page.inner_text("#limits") and "Late days" in page.inner_text("#limits")
    assert page.locator("#set-kind").count() == 0
    page.screenshot(path=str(SHOTS / "kinds-student.png"), full_page=True)
    page.close()

    page = login(browser, term, term.profile)  # the instructor ends the team's extension
    page.goto(f"{term.url}/kinds")
    page.click("button[data-end='m4:t9']")
    page.wait_for_url("**/kinds")
    assert "team t9" not in page.inner_text("#extensions")
    page.close()
    with term.http(Path(carol["RAI_PROFILE"])) as h:
        m4 = next(k for k in h.get("/api/v1/kinds").json()["kinds"] if k["name"] == "m4")
    assert m4["your_due_at"] == m4["due_at"]
    assert "kind.unextend" in term.client("admin", "audit", "-n", "3").stdout


def words_kept(narrow: str, wide: str) -> list[str]:
    """The words of ``narrow`` that are not words of ``wide`` (the same text unwrapped): a word cut
    in two by a wrap shows up here."""
    whole = set(wide.split())
    return [w for w in narrow.split() if w not in whole]


def test_kinds_and_the_audit_read_well_in_a_narrow_terminal(term):
    """Issue 49: 'admin kinds show' and 'raiclient kinds' had no header and were cut mid-word at 60
    columns; m3, closed, said "closed" while alice's extension keeps it open for her; 'admin audit'
    folded its details one word a line and could not be narrowed to an action or a person."""
    alice = student(term, "alice")
    for args, env in ((("admin", "kinds", "show"), {}), (("kinds",), alice)):
        # the same text wide just before and just after: a countdown ("due in 2 h 13 min") may
        # tick between two runs, never twice within three
        before = term.client(*args, env={**env, "COLUMNS": "400"})
        narrow = term.client(*args, env={**env, "COLUMNS": "60"})
        after = term.client(*args, env={**env, "COLUMNS": "400"})
        assert narrow.returncode == before.returncode == after.returncode == 0, narrow.stderr + before.stderr + after.stderr
        print(f"$ COLUMNS=60 raiclient {' '.join(args)}\n{narrow.stdout}")
        lines = narrow.stdout.splitlines()
        assert lines[0].split() == ["kind", "now", "dates", "and", "late", "policy"], lines[0]
        assert max(len(line) for line in lines) <= 60, narrow.stdout
        assert words_kept(narrow.stdout, before.stdout + after.stdout) == [], narrow.stdout
    staff_view = term.client("admin", "kinds", "show", env={"COLUMNS": "400"}).stdout
    assert "closed; still open for 1 student with an extension (until " in row_of(staff_view, "m3"), staff_view
    with term.http() as h:
        m3 = next(k for k in h.get("/api/v1/kinds").json()["kinds"] if k["name"] == "m3")
    assert m3["status"].startswith("closed; still open for 1 student with an extension"), m3

    # the audit: a header and one line an entry (the detail under it when the line is short), filtered on the server
    res = term.client("admin", "audit", "-n", "8", env={"COLUMNS": "80"})
    print(f"$ raiclient admin audit -n 8\n{res.stdout}")
    lines = res.stdout.splitlines()
    assert lines[0].split() == ["when", "who", "action", "target"] and max(len(line) for line in lines) <= 80, res.stdout
    entries = [line for line in lines[1:] if not line.startswith(" ")]
    assert len(entries) == 8 and all(re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d  \S", e) for e in entries), res.stdout
    folded = [b for a, b in zip(lines, lines[1:], strict=False) if a.startswith(" ") and b.startswith(" ")]
    assert folded == [], "an entry's detail over more than one line"
    wide = term.client("admin", "audit", "-n", "8", env={"COLUMNS": "200"}).stdout.splitlines()
    assert wide[0].split() == ["when", "who", "action", "target", "detail"] and len(wide) == 9, wide
    extends = term.client("admin", "audit", "--action", "kind.extend", env={"COLUMNS": "200"}).stdout.splitlines()[1:]
    assert extends and all(line.split()[3] == "kind.extend" for line in extends), extends
    assert any("username=alice" in line and "reason=illness" in line for line in extends), extends
    family = term.client("admin", "audit", "--action", "kind", env={"COLUMNS": "200"}).stdout.splitlines()[1:]
    assert {line.split()[3] for line in family} >= {"kind.change", "kind.extend"}, family
    assert all(line.split()[3].startswith("kind.") for line in family), family
    assert len(family) > len(extends)
    mine = term.client("admin", "audit", "--actor", "admin", "-n", "5", env={"COLUMNS": "200"}).stdout.splitlines()[1:]
    assert len(mine) == 5 and all(line.split()[2] == "admin" for line in mine), mine
    none = term.client("admin", "audit", "--actor", "nobody", "--action", "kind")
    assert none.returncode == 0 and none.stdout.strip() == "✱ No staff action in the audit log (action kind and by nobody)", none.stdout
    with term.http() as h:
        assert [a["action"] for a in h.get("/api/v1/admin/audit", params={"action": "kind.extend"}).json()] == ["kind.extend"] * len(
            extends
        )


def test_the_deadlines_page_at_400_px_and_its_menu(browser, term):
    """Issue 49: at 400 px the extensions' End buttons and the kinds' CSV/Canvas links were off the
    right edge, and the wrapped header took ~170 px of every page: a menu button now."""
    assert term.client("admin", "kinds", "set", "m3", "--grade", "pass").returncode == 0
    page = login(browser, term, term.profile)
    page.set_viewport_size({"width": 400, "height": 860})
    page.goto(f"{term.url}/kinds")
    header = page.locator("header").bounding_box()
    assert header and header["height"] <= 60, header
    assert not page.locator("header nav").is_visible()
    page.screenshot(path=str(SHOTS / "kinds-400.png"), full_page=True)
    assert page.evaluate("document.documentElement.scrollWidth") <= 400
    for thing in (
        "#kinds a[href='/grades/m3.csv']",
        "#kinds a[href='/grades/m3.csv?format=canvas']",
        "#extensions button[data-end='m3:alice']",
    ):
        box = page.locator(thing).bounding_box()
        assert box and box["x"] >= 0 and box["x"] + box["width"] <= 400, (thing, box)
    assert "closed; still open for 1 student with an extension" in page.inner_text("#kinds")
    page.click("#menu")
    page.locator("header nav").wait_for(state="visible")
    out = page.locator("header .who button").bounding_box()
    assert out and out["x"] + out["width"] <= 400, out
    page.screenshot(path=str(SHOTS / "kinds-400-menu.png"))
    page.click("header nav >> text=Queue")
    page.wait_for_url("**/queue")
    page.set_viewport_size({"width": 1400, "height": 860})
    page.goto(f"{term.url}/kinds")
    assert not page.locator("#menu").is_visible() and page.locator("header nav").is_visible()
    assert page.locator("header").bounding_box()["height"] <= 60
    page.screenshot(path=str(SHOTS / "kinds-1400.png"), full_page=True)
    page.close()
