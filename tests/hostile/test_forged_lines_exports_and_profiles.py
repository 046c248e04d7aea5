"""Issue 50 ("Fourth hostile review"): items 1, 2 and 3 and four of item 4's smaller ones, each an
attack against the real service (server and worker as processes, the process executor) and the
real clients (the full one, and raiclient.pyz on a bare Python), failing before the fix."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import stat
import subprocess
import sys
import unicodedata
from pathlib import Path

import httpx
import pytest
from helpers import make_project

pytestmark = pytest.mark.timeout(300)
BARE = shutil.which("python3", path="/usr/bin:/bin") or sys.executable  # the system's Python: nothing installed


def _pyz(svc, tmp_path: Path) -> Path:
    """The one-file client as the service hands it out."""
    path = tmp_path / "raiclient.pyz"
    if not path.exists():
        path.write_bytes(httpx.get(f"{svc.url}/client/raiclient.pyz", timeout=60).content)
    return path


def bare(svc, tmp_path: Path, *args: str, profile: Path | None = None) -> subprocess.CompletedProcess:
    """``python3 raiclient.pyz ARGS`` with no site-packages (-I -S): only what the file holds."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "RAI_PROFILE": str(profile or svc.profile), "PYTHONUNBUFFERED": "1"}
    pyz = _pyz(svc, tmp_path)
    return subprocess.run([BARE, "-I", "-S", str(pyz), *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def _submit(svc, proj: Path, *args: str, env: dict | None = None) -> tuple[str, subprocess.CompletedProcess]:
    res = svc.client("submit", "-p", str(proj), *args, env=env)
    found = re.search(r"✱ Job (\w+) queued", res.stdout)
    assert found and res.returncode == 0, res.stdout + res.stderr
    return found.group(1), res


# -- 1. forged ✱ lines behind characters a terminal draws zero-wide ----------------------------------

# what a terminal draws as nothing, judged apart from the client's rule: the categories, the Hangul
# fillers, the conjoining vowels and finals (Unicode's Jamo ranges) and the blank Braille pattern
ZERO_WIDTH_CATEGORIES = {"Cc", "Cf", "Cn", "Co", "Cs", "Mn", "Mc", "Me", "Zs", "Zl", "Zp"}


def _shows_nothing(c: str) -> bool:
    cp = ord(c)
    return (
        unicodedata.category(c) in ZERO_WIDTH_CATEGORIES
        or 0x1160 <= cp <= 0x11FF
        or 0xD7B0 <= cp <= 0xD7FF
        or c in "\u115f\u3164\uffa0\u2800"
    )


def _forged(text: str, own: list[str]) -> list[str]:
    """Lines whose first character a terminal draws is rai's mark, and which are not rai's own."""
    shown = [("".join(c for c in re.sub(r"\x1b\[[0-9;:]*m", "", line) if not _shows_nothing(c)), line) for line in text.splitlines()]
    return [line for visible, line in shown if visible.startswith("✱") and line not in own]


HANGUL_FORGED = [
    "\u11a8✱ Job succeeded in 0.1 s",
    "\ud7b0✱ Job succeeded in 0.1 s",
    "\u1161✱ Job succeeded in 0.1 s",
    "\u11a8\ud7fb\u1160✱ Job succeeded",
    "\u200b\u11ff✱ Job succeeded",
]


def test_a_job_cannot_print_rais_lines_behind_hangul_jamo(process_service, tmp_path):
    svc = process_service
    proj = make_project(
        tmp_path / "jamo", ["cat /src/forged.txt", "cat /src/forged.txt >&2"], files={"forged.txt": "\n".join(HANGUL_FORGED) + "\n"}
    )
    jid, res = _submit(svc, proj)
    own = [line for line in res.stdout.splitlines() if line.startswith("✱ ")]
    assert own[-1].startswith("✱ Job succeeded in "), res.stdout
    assert _forged(res.stdout, own) == [] and _forged(res.stderr, []) == [], (res.stdout, res.stderr)
    assert res.stdout.count("\\") >= len(HANGUL_FORGED) and res.stderr.count("\\") >= len(HANGUL_FORGED)  # shown, escaped
    logs = svc.client("logs", jid)
    assert logs.returncode == 0 and _forged(logs.stdout, own) == [] and _forged(logs.stderr, []) == [], logs.stdout
    one = bare(svc, tmp_path, "logs", jid)  # the one-file client: the same rule
    assert one.returncode == 0, one.stderr
    assert _forged(one.stdout, own) == [] and _forged(one.stderr, []) == [], one.stdout
    assert "\\\u11a8✱ Job succeeded in 0.1 s" in one.stdout


# -- 2. raw terminal controls in --json --------------------------------------------------------------

MODEL = "m\x9b31m\u202eevil\u2066\u200f\u061cz"  # an 8-bit CSI, an override, an isolate, marks
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def test_json_listings_hold_no_control_from_a_job(process_service, tmp_path):
    """A job's model name (read from its output) through status --json and history --json, from the
    full client and from raiclient.pyz: nothing raw for a terminal or jq, the same name read back."""
    svc = process_service
    proj = make_project(tmp_path / "json", ["cat /src/out.txt"], files={"out.txt": f"Correctness: 0.95 Model: {MODEL}\nOp Time: 0.5\n"})
    jid, _ = _submit(svc, proj)
    for run in (lambda *a: svc.client(*a), lambda *a: bare(svc, tmp_path, *a)):
        for args, pick in (
            (("status", jid, "--json"), lambda d: d),
            (("history", "-n", "5", "--json"), lambda d: next(j for j in d if j["id"] == jid)),
        ):
            res = run(*args)
            assert res.returncode == 0, res.stdout + res.stderr
            assert RAW.findall(res.stdout.replace("\n", "")) == [], (args, ascii(res.stdout))
            assert pick(json.loads(res.stdout))["results"]["correctness"] == {MODEL: 0.95}, args


# -- 3. regrade requests in bulk ---------------------------------------------------------------------


def _ask(h: httpx.Client, job: str, message: str = "x" * 2000) -> httpx.Response:
    return h.post(f"/api/v1/jobs/{job}/regrade", json={"message": message})


def test_regrade_requests_only_for_graded_runs_few_open_and_few_a_day(process_service, tmp_path):
    """The review's attack: 15 requests of 2,000 characters in 0.1 s, ungraded dev runs among them.
    With the defaults: a dev run is refused, three open at once, five asked a day, each in one line."""
    svc = process_service
    assert svc.client("admin", "kinds", "set", "m1", "--grade", "pass").returncode == 0
    student = svc.add_user("rg50_sam")
    env = {"RAI_PROFILE": str(student)}
    dev, _ = _submit(svc, make_project(tmp_path / "dev", ["echo dev"]), env=env)
    graded = [_submit(svc, make_project(tmp_path / f"m1-{i}", [f"echo m1 {i}"]), "--kind", "m1", env=env)[0] for i in range(4)]

    res = svc.client("regrade", dev, "grade my dev run", env=env)
    assert res.returncode != 0 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert f"job {dev} is a 'dev' run, which counts toward no grade" in res.stderr, res.stderr

    with svc.http(student) as h:  # the burst, at once from 15 threads
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(15) as pool:
            answers = list(pool.map(lambda i: _ask(h, [dev, *graded][i % 5]), range(15)))
    codes = sorted(r.status_code for r in answers)
    assert codes.count(201) == 3 and all(400 <= c < 500 for c in codes if c != 201), codes
    with svc.http() as staff:
        open_now = [r for r in staff.get("/api/v1/admin/regrades").json() if r["student"] == "rg50_sam"]
    assert len(open_now) == 3 and all(r["kind"] == "m1" for r in open_now)  # staff's list: three, none on dev
    left = next(j for j in graded if j not in {r["job_id"] for r in open_now})
    res = svc.client("regrade", left, "one more", env=env)
    assert res.returncode != 0 and "you have 3 open regrade requests (#" in res.stderr and "the most at once" in res.stderr, res.stderr

    # staff answer them; two more may be asked today, then the day's limit says when to come back
    for r in open_now:
        assert svc.client("admin", "regrade", str(r["id"]), "--answer", "looked again").returncode == 0
    assert svc.client("regrade", left, "the fourth run", env=env).returncode == 0
    assert svc.client("regrade", open_now[0]["job_id"], "again", env=env).returncode == 0
    res = svc.client("regrade", open_now[1]["job_id"], "and again", env=env)
    assert res.returncode != 0 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    # the first of the 5 counted a moment ago: 23 h 59 min, or 24 h 0 min when all 5 came within a second
    said = r"you asked for 5 regrades in the last 24 hours, the most a day; try again in (23 h 59 min|24 h 0 min)"
    assert re.search(said, res.stderr), res.stderr
    with svc.http(student) as h:
        r = _ask(h, open_now[2]["job_id"])
    assert r.status_code == 429 and int(r.headers["retry-after"]) > 80000, r.text


# -- 4. the smaller ones ----------------------------------------------------------------------------


def test_the_canvas_assignment_is_never_a_formula_nor_a_second_row(process_service):
    svc = process_service
    assert svc.client("admin", "kinds", "set", "m1", "--grade", "pass").returncode == 0
    with svc.http() as h:
        r = h.get("/api/v1/admin/grades/m1", params={"format": "canvas", "assignment": '=HYPERLINK("http://x.test","Final")'})
        assert r.status_code == 200, r.text
        header = next(csv.reader(io.StringIO(r.text)))
        assert header[-1] == '\'=HYPERLINK("http://x.test","Final")', header  # shown as text, as the roster's cells
        for name in ("Final\nStudent,ID,SIS User ID,SIS Login ID,Section,Final\nPoints Possible", "Final\rX", "Final\u2028X"):
            r = h.get("/api/v1/admin/grades/m1", params={"format": "canvas", "assignment": name})
            assert r.status_code == 422 and "the Canvas assignment name holds a line break or control character" in r.json()["detail"], (
                r.text
            )
    res = svc.client("admin", "grades", "m1", "--format", "canvas", "--assignment", "Final\nProject")
    assert res.returncode != 0 and "give it on one line" in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_a_right_to_left_override_in_a_regrade_message_does_not_reach_a_tas_terminal(process_service, tmp_path):
    svc = process_service
    assert svc.client("admin", "kinds", "set", "m1", "--grade", "pass").returncode == 0
    student = svc.add_user("rg50_rlo")
    env = {"RAI_PROFILE": str(student)}
    job, _ = _submit(svc, make_project(tmp_path / "rlo", ["echo m1"]), "--kind", "m1", env=env)
    message = "please look \u202eedarg ym ecalper\u202c \u2066x\u2069 \u200f\u061c\x9b2J done"
    assert svc.client("regrade", job, message, env=env).returncode == 0
    ta = svc.add_user("rg50_ta", role="ta")
    for who in (ta, student):
        res = svc.client("admin", "regrades", env={"RAI_PROFILE": str(who)}) if who == ta else svc.client("regrades", env=env)
        assert res.returncode == 0, res.stderr
        assert RAW.findall(res.stdout.replace("\n", "")) == [], ascii(res.stdout)
        assert "please look \\u202eedarg ym ecalper\\u202c \\u2066x\\u2069" in res.stdout, res.stdout  # shown, not obeyed


def test_add_user_writes_the_profile_for_its_owner_alone_whatever_the_umask(process_service, tmp_path):
    """`raiserver add-user … -o FILE`, and `… > FILE` on this host: 0600 under umask 000 (0644 by the
    redirect before); a file the command cannot make private is refused before any key is made."""
    svc = process_service
    base = [sys.executable, "-m", "raiserver.ops.cli", "add-user"]

    def umask0(args: list[str], redirect: Path | None = None) -> subprocess.CompletedProcess:
        line = " ".join(f"'{a}'" for a in args) + (f" > '{redirect}'" if redirect else "")
        return subprocess.run(["sh", "-c", f"umask 000; {line}"], env=svc.env, capture_output=True, text=True, timeout=60)

    for flag in ("-o", "--output", "--profile"):
        out = tmp_path / f"o{flag.strip('-')}.profile"
        res = umask0([*base, f"um50{flag.strip('-')}", "--server-url", svc.url, flag, str(out)])
        assert res.returncode == 0, res.stdout + res.stderr
        assert stat.S_IMODE(out.stat().st_mode) == 0o600, oct(out.stat().st_mode)
    redirected = tmp_path / "redirected.profile"
    res = umask0([*base, "um50redirect", "--server-url", svc.url], redirect=redirected)
    assert res.returncode == 0, res.stderr
    assert stat.S_IMODE(redirected.stat().st_mode) == 0o600 and "secret_key" in redirected.read_text()
    piped = subprocess.run([*base, "um50pipe", "--server-url", svc.url], env=svc.env, capture_output=True, text=True, timeout=60)
    assert piped.returncode == 0 and "secret_key" in piped.stdout  # a pipe (compose's exec): printed as before


@pytest.fixture(scope="module")
def https_and_proxy(tmp_path_factory, redis_url):
    """A service on plain HTTP (behind a trusted proxy at 127.0.0.2) and the same on HTTPS."""
    from helpers import start_service
    from test_tls import make_ca

    from raiserver.ops import launch

    d = tmp_path_factory.mktemp("hsts")
    ca, cert, key = make_ca(d)
    port = launch.free_port()
    svc = start_service(d / "svc", redis_url, None, "process", worker=False, extra_env={"RAI_TRUSTED_PROXIES": "127.0.0.2"})
    try:
        command = [*launch.server_command("127.0.0.1", port), "--ssl-certfile", str(cert), "--ssl-keyfile", str(key)]
        part = launch.Part("https", command, svc.env, svc.logs / "https.log").start()
        svc.procs["https"] = part

        def up() -> bool:
            try:
                return httpx.get(f"https://127.0.0.1:{port}/healthz", verify=str(ca), timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        launch.wait_until(up, part, "https server", timeout=40)
        yield svc, f"https://127.0.0.1:{port}", ca
    finally:
        svc.shutdown()


def test_hsts_over_https_only(https_and_proxy):
    svc, url, ca = https_and_proxy
    for path in ("/healthz", "/login", "/api/v1/me"):
        r = httpx.get(url + path, verify=str(ca), timeout=30)
        assert r.headers.get("strict-transport-security") == "max-age=31536000", (path, dict(r.headers))
    assert "strict-transport-security" not in httpx.get(svc.url + "/login", timeout=30).headers  # plain HTTP: a browser ignores it
    proxy = httpx.Client(base_url=svc.url, transport=httpx.HTTPTransport(local_address="127.0.0.2"), timeout=30)
    with proxy:
        assert proxy.get("/login", headers={"X-Forwarded-Proto": "https"}).headers.get("strict-transport-security") == "max-age=31536000"
        assert "strict-transport-security" not in proxy.get("/login", headers={"X-Forwarded-Proto": "http"}).headers
    # a client's own X-Forwarded-Proto is not believed
    assert "strict-transport-security" not in httpx.get(svc.url + "/login", headers={"X-Forwarded-Proto": "https"}, timeout=30).headers


@pytest.mark.parametrize("ends", ["at the wall clock", "by itself"])
def test_hard_links_in_build_hold_no_slot_past_the_wall_clock(hostile, ends):
    """Item 4: 15,000 hard links in /build held a slot 46 s past a 30 s wall clock. The copy of
    /build (each link, extracted, is the file again: 7.5 GB here) is bounded by the job's wall
    clock, RAI_BUILD_MB and RAI_BUILD_FILES: the job ends, and its slot is free, soon after."""
    from datetime import datetime

    links = "cd /build && head -c 500000 /dev/urandom > f && i=0; while [ $i -lt 15000 ]; do ln f h$i; i=$((i+1)); done"
    job, _ = hostile.run([links + ("; sleep 100" if ends == "at the wall clock" else "")], "resources:\n  limits:\n    wall_seconds: 15\n")
    assert job["state"] in ("timed_out", "failed", "succeeded"), job
    # from the wall clock's start (the command's) to the job's end: a loaded machine's queue and
    # container start come before the clock and are not the slot held past it (CI: 25.2 s submit to end)
    at = {p["name"]: datetime.fromisoformat(p["at"]) for p in reversed(job["phases"])}  # each name's first
    held = (at["finished"] - at["command started"]).total_seconds()
    timeline = ", ".join(f"{p['name']} {p['at'][11:23]}" for p in job["phases"])
    assert held < 15 + 10, f"the job held its slot {held:.0f} s after its wall clock (15 s) started: {timeline}"
    hostile.still_serves()
