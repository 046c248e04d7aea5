"""Issue 50 ("Fourth hostile review"): items 1, 2 and 3 and four of item 4's smaller ones, each an
attack against the real service (server and worker as processes, the process executor) and the
real clients (the full one, and raiclient.pyz on a bare Python), failing before the fix."""

from __future__ import annotations

import json
import re
import shutil
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
    assert "you asked for 5 regrades in the last 24 hours, the most a day; try again in 23 h" in res.stderr, res.stderr
    with svc.http(student) as h:
        r = _ask(h, open_now[2]["job_id"])
    assert r.status_code == 429 and int(r.headers["retry-after"]) > 80000, r.text
