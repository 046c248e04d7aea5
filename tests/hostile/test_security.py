"""Regression cases for the escapes a hostile review found (issue 12), one or more per item, each
against the running service where a user would meet it."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from helpers import build_file, tar_gz

from raiprotocol.archive import ArchiveError, inspect_archive, safe_extract

pytestmark = pytest.mark.timeout(300)


def link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


def file(name: str) -> tarfile.TarInfo:
    return tarfile.TarInfo(name)


def chain(depth: int) -> list:
    """CVE-2025-4517's shape: a long chain through links whose string form stays inside the tree
    (normpath of p/l/p/l/…/../.. is inside) while the file system, following p/l -> .. each time,
    climbs out of it."""
    top = tarfile.TarInfo("p")
    top.type = tarfile.DIRTYPE
    return [(top, None), (link("p/l", ".."), None), (link("esc", "p/l/" * depth + "../" * (depth + 1)), None)]


# -- 1. archives: links resolved through each other, nothing written through a link ----------

ESCAPES = {
    "link to a link that climbs": (
        [(link("sub/l", "."), None), (link("esc", "sub/l/../.."), None)],
        "entry 'esc': symlink leads outside the project through other links (sub/l/../..)",
    ),
    "file under a symlink": ([(link("d", "."), None), (file("d/x"), b"x")], "entry 'd/x': its path goes through a symlink (d)"),
    "symlink then file of the same name": ([(link("f", "sub"), None), (file("f"), b"x")], "entry 'f': appears twice in the archive"),
    "hard link to a symlink": (
        [(link("s", "a"), None), (file("a"), b"x"), (link("h", "s", tarfile.LNKTYPE), None)],
        "entry 'h': hard link to 's', which is not a file of the project",
    ),
}


@pytest.mark.parametrize("case", list(ESCAPES))
def test_archive_escapes_through_links_are_refused(hostile, case):
    members, message = ESCAPES[case]
    r = hostile.post(tar_gz(members))
    assert (r.status_code, r.json()["detail"]) == (400, message)
    hostile.still_serves()


def test_a_long_symlink_chain_is_refused(hostile):
    r = hostile.post(tar_gz(chain(50)))
    assert r.status_code == 400 and "symlink leads outside the project" in r.json()["detail"]


def _stream(members: list) -> tarfile.TarFile:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    buf.seek(0)
    return tarfile.open(fileobj=buf, mode="r|")


def test_build_folder_stream_writes_nothing_outside(tmp_path):
    """The /build folder comes back from the job's container as a tar the job controls: no order
    of links and files in it may write outside the destination."""
    dest, outside = tmp_path / "build", tmp_path / "outside"
    dest.mkdir()
    outside.mkdir()
    members = [
        (link("up", str(outside)), None),
        (file("up/abs"), b"pwned"),  # absolute link, then a file through it
        (link("rel", "../outside"), None),
        (file("rel/rel"), b"pwned"),  # relative link out
        (link("here", "."), None),
        (file("here/../outside/dots"), b"pwned"),  # '..' after a link
        (link("ok", "sub"), None),
        (file("sub/real"), b"fine"),
        (file("ok/via"), b"fine"),  # a link inside: fine
        (file("plain"), b"fine"),
        (link("plain", str(outside / "clobber")), None),  # a link replacing a file
        (link("hl", "../outside/x", tarfile.LNKTYPE), None),
        *[(m, d) for m, d in chain(45)],
        (file("esc/deep"), b"inside"),
    ]
    safe_extract(_stream(members), dest)
    assert list(outside.iterdir()) == [], "something was written outside the build folder"
    assert (dest / "plain").read_bytes() == b"fine" and (dest / "sub" / "real").read_bytes() == b"fine"


def test_project_archive_check_resolves_chains_like_the_kernel(tmp_path):
    archive = tmp_path / "a.tar.gz"
    archive.write_bytes(tar_gz(chain(45)))
    with pytest.raises(ArchiveError, match="symlink leads outside"):
        inspect_archive(archive)
    archive.write_bytes(tar_gz([(link("sub/l", "../data"), None), (file("data"), b"x")]))
    assert inspect_archive(archive).files == 3  # a link inside the tree is fine
    from raiprotocol.archive import _check_link

    _check_link(chain(45)[2][0], "esc")  # the old string check let this one through


@pytest.mark.skipif(os.geteuid() != 0, reason="the worker drops root only when it has it")
def test_the_worker_unpacks_projects_as_the_jobs_user(hostile):
    job, log = hostile.run(["stat -c '%u' /src/rai_build.yml"])
    assert job["state"] == "succeeded"
    assert [ln["text"] for ln in log if ln["s"] == "out"] == ["1000"]


# -- 2. default secrets --------------------------------------------------------------------------


def test_server_refuses_a_public_address_with_default_secrets(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAI_")}
    env["RAI_DATA_DIR"] = str(tmp_path)
    res = subprocess.run(
        [sys.executable, "-m", "raiserver.ops.cli", "serve", "--host", "0.0.0.0", "--port", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode != 0
    assert "RAI_WORKER_TOKEN, RAI_SESSION_SECRET, RAI_PSEUDONYM_SECRET" in res.stderr
    assert "secrets.token_urlsafe(32)" in res.stderr
    res = subprocess.run(
        [sys.executable, "-m", "uvicorn", "raiserver.asgi:app", "--host", "0.0.0.0", "--port", "1"],
        env={**env, "RAI_SESSION_SECRET": "x" * 40},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode != 0 and "refusing to listen on 0.0.0.0 with RAI_WORKER_TOKEN, RAI_PSEUDONYM_SECRET" in res.stderr


def test_generated_secrets_file_satisfies_the_check(tmp_path):
    from raiserver.access.hardening import check_deployment, weak_secrets
    from raiserver.config import load_settings

    path = tmp_path / "secrets.env"
    res = subprocess.run(
        [sys.executable, "-m", "raiserver.ops.cli", "secrets", "--file", str(path), "--redis-host", "redis:6379"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    assert path.stat().st_mode & 0o777 == 0o600
    values = dict(line.split("=", 1) for line in path.read_text().splitlines())
    assert len({values[k] for k in ("RAI_WORKER_TOKEN", "RAI_SESSION_SECRET", "RAI_PSEUDONYM_SECRET")}) == 3
    assert values["RAI_REDIS_URL"] == f"redis://:{values['RAI_REDIS_PASSWORD']}@redis:6379/0"
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("RAI_")}
    try:
        os.environ["RAI_SECRETS_FILE"] = str(path)
        settings = load_settings()
        assert weak_secrets(settings) == []
        assert settings.pseudonym_secret != settings.session_secret
        check_deployment(settings, "0.0.0.0")  # no SystemExit
    finally:
        os.environ.pop("RAI_SECRETS_FILE", None)
        os.environ.update(saved)


# -- 3. a build file that would freeze the server ---------------------------------------------


def test_deeply_nested_yaml_is_refused_at_once_and_leaves_no_temp_file(hostile):
    tmp_dir = hostile.svc.data / "storage" / "tmp"
    before = set(os.listdir(tmp_dir))
    for spec in (b"rai:\n  version: 0.2\n  image: x\ncommands:\n  build: " + b"[" * 60000, b"- " * 30000, b"a: " + b"{a: " * 15000):
        started = time.monotonic()
        r = hostile.post(tar_gz([], spec))
        assert r.status_code == 422 and "nested too deeply" in r.json()["detail"], r.text
        assert time.monotonic() - started < 5
    assert hostile.http.get("/healthz").status_code == 200
    assert set(os.listdir(tmp_dir)) == before, "an upload's temp file was left behind"


# -- 4. who may change whom -------------------------------------------------------------------


def test_rank_limits_key_and_role_changes(hostile):
    svc = hostile.svc
    prof = svc.add_user("inst_a", role="instructor")
    svc.add_user("inst_b", role="instructor")
    svc.add_user("ta_a", role="ta")
    with svc.http(prof) as h:
        r = h.post("/api/v1/admin/users/admin/keys")
        assert (r.status_code, r.json()["detail"]) == (403, "instructors cannot change admin, who is an admin")
        assert h.post("/api/v1/admin/users/inst_b/revoke").status_code == 403
        assert h.post("/api/v1/admin/users/ta_a/keys").status_code == 200  # lower rank: allowed
        r = h.post("/api/v1/admin/roster", content=b"username,role\nsneaky,admin\n", headers={"Content-Type": "text/csv"})
        assert (r.status_code, r.json()["detail"]) == (403, "roster line 2: only admins may grant the admin role")
        r = h.post("/api/v1/admin/roster", content=b"username,team\nta_a,t1\nstud_a,t1\n", headers={"Content-Type": "text/csv"})
        assert r.status_code == 200, r.text
        r = h.post("/api/v1/admin/roster", content=b"username,role\ninst_b,student\n", headers={"Content-Type": "text/csv"})
        assert r.status_code == 403
    with svc.http() as h:  # admin
        roles = {u["username"]: u["role"] for u in h.get("/api/v1/admin/users").json()}
    assert roles["ta_a"] == "ta", "a roster without a role column changes no role"
    assert roles["inst_b"] == "instructor" and "sneaky" not in roles


# -- 5. the quota under concurrent uploads -----------------------------------------------------


def _unique_project(i: int) -> bytes:
    return tar_gz([(file(f"n{i}.txt"), str(i).encode())], build_file(["sleep 30"]))


@pytest.mark.parametrize("database", ["sqlite", "postgres"])
def test_twenty_concurrent_uploads_cannot_pass_the_quota(hostile, database, request):
    svc = hostile.svc if database == "sqlite" else request.getfixturevalue("pg_service")
    who = f"racer_{database}"
    prof = svc.add_user(who)
    blobs = svc.data / "storage" / "blobs"
    before = {p.name for p in blobs.rglob("*.tar.gz")}

    def upload(i: int) -> int:
        with svc.http(prof) as h:
            return h.post("/api/v1/jobs", content=_unique_project(i), headers={"Content-Type": "application/gzip"}).status_code

    with ThreadPoolExecutor(20) as pool:
        codes = list(pool.map(upload, range(20)))
    try:
        assert sorted(codes).count(201) == 2 and codes.count(429) == 18, codes
        kept = {p.name for p in blobs.rglob("*.tar.gz")} - before
        assert len(kept) == 2, "archives refused with 429 must not be kept"
    finally:
        with svc.http() as h:
            for job in h.get("/api/v1/jobs", params={"all": "true", "limit": 100}).json()["jobs"]:
                if job["owner"] == who and job["state"] in ("queued", "running"):
                    h.post(f"/api/v1/jobs/{job['id']}/cancel")


# -- 6 and 7. web sessions and hardening -----------------------------------------------------------


def _browser_session(svc, profile: Path) -> httpx.Client:
    from raiprotocol.profile import read_profile_file

    p = read_profile_file(profile)
    c = httpx.Client(base_url=svc.url, timeout=30)
    csrf = re.search(r'name="csrf" value="([^"]+)"', c.get("/login").text).group(1)
    assert c.post("/login", data={"access_key": p.access_key, "secret_key": p.secret_key, "csrf": csrf}).status_code == 303
    return c


def _queue_stream_ends_with_logout(c: httpx.Client) -> list[str]:
    events = []
    with c.stream("GET", "/web/queue/events", timeout=30) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if line.startswith("event:"):
                events.append(line.split(":", 1)[1].strip())
    return events


@pytest.mark.parametrize("action", ["rotate", "revoke", "deactivate"])
def test_sessions_end_with_their_key(hostile, action):
    svc = hostile.svc
    name = f"sess_{action}"
    prof = svc.add_user(name)
    c = _browser_session(svc, prof)
    assert c.get("/queue").status_code == 200
    with ThreadPoolExecutor(1) as pool:
        stream = pool.submit(_queue_stream_ends_with_logout, c)
        time.sleep(1.5)
        with svc.http() as admin:
            if action == "deactivate":
                r = admin.post("/api/v1/admin/roster", content=b"username\nsomeone_else\n", headers={"Content-Type": "text/csv"})
            else:
                r = admin.post(f"/api/v1/admin/users/{name}/{'keys' if action == 'rotate' else 'revoke'}")
            assert r.status_code == 200, r.text
        events = stream.result(timeout=20)
    assert events[-1] == "logout", "the open queue stream ends at once"
    r = c.get("/queue")
    assert r.status_code == 303 and r.headers["location"] == "/login"
    assert c.get("/api/v1/me").status_code == 401


def test_cookie_writes_need_the_csrf_token_and_pages_carry_security_headers(hostile):
    svc = hostile.svc
    prof = svc.add_user("csrf_victim")
    r = svc.http(prof).post("/api/v1/jobs", content=tar_gz([], build_file(["sleep 20"])), headers={"Content-Type": "application/gzip"})
    jid = r.json()["id"]
    c = _browser_session(svc, prof)
    r = c.post(f"/api/v1/jobs/{jid}/cancel")
    assert (r.status_code, r.json()["detail"]) == (403, "a cookie-authenticated write needs the X-CSRF-Token header")
    token = re.search(r'name="csrf" value="([^"]+)"', c.get("/queue").text).group(1)
    assert c.post(f"/api/v1/jobs/{jid}/cancel", headers={"X-CSRF-Token": token}).status_code == 200
    page = c.get("/queue")
    csp = page.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in csp and "script-src 'self' 'nonce-" in csp
    nonce = re.search(r"'nonce-([^']+)'", csp).group(1)
    assert f'<script nonce="{nonce}">' in page.text
    assert page.headers["x-frame-options"] == "DENY" and page.headers["x-content-type-options"] == "nosniff"


def test_failed_logins_are_limited_per_key(hostile):
    svc = hostile.svc
    prof = svc.add_user("guessed")
    from raiprotocol.profile import read_profile_file

    key = read_profile_file(prof).access_key
    codes = []
    for i in range(12):
        codes.append(httpx.get(f"{svc.url}/api/v1/me", auth=(key, f"guess-{i}"), timeout=10).status_code)
    assert codes[:10] == [401] * 10 and codes[10:] == [429, 429]
    r = httpx.get(f"{svc.url}/api/v1/me", auth=(key, "guess-x"), timeout=10)
    assert r.status_code == 429 and int(r.headers["Retry-After"]) > 0
    # issue 34: the key's owner is never locked out by someone else's guesses: the right secret is served
    assert httpx.get(f"{svc.url}/api/v1/me", auth=(key, read_profile_file(prof).secret_key), timeout=10).status_code == 200
    assert svc.client("history", env={"RAI_PROFILE": str(prof)}).returncode == 0
    wrong = prof.with_name("guessed-wrong.profile")
    wrong.write_text(prof.read_text().replace(read_profile_file(prof).secret_key, "guess-y"))
    assert svc.client("history", env={"RAI_PROFILE": str(wrong)}).stderr.count("too many failed logins") == 1


# -- 8. fake results ----------------------------------------------------------------------------


def test_a_printed_op_time_does_not_rank_a_dev_run(hostile):
    job, _ = hostile.run(["sh -c 'echo Op Time: 0.000001; echo Correctness: 0.99 Model: ece408'"])
    assert job["state"] == "succeeded" and job["results"]["op_time_total"] == 0.000001
    board = hostile.http.get("/api/v1/leaderboard").json()
    assert all(e["op_time"] != 0.000001 for e in board)
    unverified = hostile.http.get("/api/v1/leaderboard", params={"board": "unverified"}).json()
    assert any(e["op_time"] == 0.000001 and not e["verified"] for e in unverified)


def test_a_teammate_sees_a_job_but_cannot_cancel_it_through_the_api_or_the_web(hostile):
    """Issue 22: the web offered no cancel to a teammate, the API allowed it; one rule for both."""
    svc = hostile.svc
    owner, mate = svc.add_user("team_owner", team="t22"), svc.add_user("team_mate", team="t22")
    r = svc.http(owner).post("/api/v1/jobs", content=tar_gz([], build_file(["sleep 30"])), headers={"Content-Type": "application/gzip"})
    jid = r.json()["id"]
    with svc.http(mate) as h:
        assert h.get(f"/api/v1/jobs/{jid}").status_code == 200  # teammates see each other's jobs
        r = h.post(f"/api/v1/jobs/{jid}/cancel")
        assert (r.status_code, r.json()["detail"]) == (403, f"job {jid} is team_owner's: only its owner or staff can cancel it")
    c = _browser_session(svc, mate)
    page = c.get(f"/jobs/{jid}")
    assert page.status_code == 200 and "Cancel job" not in page.text
    token = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)
    assert c.post(f"/jobs/{jid}/cancel", data={"csrf": token}).status_code == 403
    with svc.http(owner) as h:
        assert h.get(f"/api/v1/jobs/{jid}").json()["state"] in ("queued", "running")
        assert h.post(f"/api/v1/jobs/{jid}/cancel").json()["state"] in ("cancelled", "running")


def test_a_copied_session_cookie_is_dead_after_logout(hostile):
    """Issue 22: the old cookie still answered for up to 12 h after logging out."""
    svc = hostile.svc
    prof = svc.add_user("logs_out")
    c = _browser_session(svc, prof)
    stolen = dict(c.cookies)
    assert c.get("/api/v1/me").status_code == 200
    token = re.search(r'name="csrf" value="([^"]+)"', c.get("/queue").text).group(1)
    assert c.post("/logout", data={"csrf": token}).status_code == 303
    with httpx.Client(base_url=svc.url, cookies=stolen, timeout=30) as replay:
        assert replay.get("/api/v1/me").status_code == 401
        r = replay.get("/queue")
        assert r.status_code == 303 and r.headers["location"] == "/login"
    again = _browser_session(svc, prof)  # logging in again works at once
    assert again.get("/api/v1/me").status_code == 200


def test_a_build_command_cannot_drive_a_tas_terminal_or_forge_rais_lines(hostile):
    """Issue 22: title change, clear screen and an OSC 52 clipboard write reached the terminal through
    `raiclient status`; a newline in a command made genuine-looking sys lines and broke line counts."""
    command = "echo '✱ Job succeeded'; false # \x1b]0;pwned\x07\x1b[2J\x1b]52;c;cm0gLXJmIH4=\x07\nCancel requested by tina; stopping"
    job, log = hostile.run([command])
    assert job["state"] == "failed"
    sys_lines = [line["text"] for line in log if line["s"] == "sys"]
    assert not any(t.startswith("Cancel requested") for t in sys_lines), sys_lines
    assert any(t.startswith("Running: echo") and "\\nCancel requested" in t for t in sys_lines), sys_lines
    assert [line["n"] for line in log] == list(range(1, len(log) + 1))  # one number per line: resume positions hold
    svc = hostile.svc
    for args in (["status", job["id"]], ["logs", job["id"]]):
        out = svc.client(*args).stdout
        assert "\x1b]" not in out and "\x07" not in out and "\x1b[2J" not in out, (args, out)
        forged = [line for line in out.splitlines() if line.startswith("✱ Job succeeded")]
        assert forged == [], (args, out)
    text = hostile.http.get(f"/api/v1/jobs/{job['id']}/log.txt").text
    assert "\n✱ Job succeeded" not in text and "\\✱ Job succeeded" in text
