"""Issue 34 ("Third hostile review"), items 3, 4, 6 and 7: each attack run against the real service
(server, and a worker where a job is needed, as processes; the process executor), failing before
the fix.

Addresses: the test machine is the client, the proxy and the server at once, so the proxy is
127.0.0.2 (the whole of 127/8 is this machine's) and direct clients are 127.0.0.1."""

from __future__ import annotations

import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import time
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from helpers import ROOT, Service, make_project, start_service

from raiprotocol.profile import read_profile_file

pytestmark = pytest.mark.timeout(300)
PROXY = "127.0.0.2"
PER_IP = 20


@pytest.fixture(scope="module")
def proxied(tmp_path_factory, redis_url) -> Iterator[Service]:
    """A server behind a reverse proxy at PROXY, as the README configures one."""
    svc = start_service(
        tmp_path_factory.mktemp("proxied"),
        redis_url,
        None,
        "process",
        worker=False,
        extra_env={"RAI_TRUSTED_PROXIES": PROXY, "RAI_CONNECTIONS_PER_ADDRESS": "5", "RAI_LOGIN_FAILURES_PER_IP": str(PER_IP)},
    )
    yield svc
    svc.shutdown()


def via_proxy(svc: Service) -> httpx.Client:
    """Requests as the proxy sends them: from its address."""
    return httpx.Client(base_url=svc.url, transport=httpx.HTTPTransport(local_address=PROXY), timeout=30)


def direct(svc: Service) -> httpx.Client:
    return httpx.Client(base_url=svc.url, timeout=30)


# -- 3. behind a proxy: /metrics and the login limit ---------------------------------------------


def test_metrics_that_came_through_a_proxy_need_the_token(proxied, process_service):
    """Behind nginx on the same host every request arrives from loopback: an outsider read /metrics."""
    with direct(proxied) as me, via_proxy(proxied) as proxy:
        assert me.get("/metrics").status_code == 200  # this machine's own scrape, direct
        for headers in (
            {"X-Forwarded-For": "127.0.0.1"},
            {"X-Real-IP": "203.0.113.5"},
            {"Forwarded": "for=127.0.0.1"},
            {"X-Forwarded-Proto": "https"},
        ):
            assert me.get("/metrics", headers=headers).status_code == 403, headers  # a proxy on this host forwarded it
        for headers in ({}, {"X-Real-IP": "127.0.0.1"}, {"X-Forwarded-For": "127.0.0.1"}):
            r = proxy.get("/metrics", headers=headers)
            assert r.status_code == 403 and "RAI_METRICS_TOKEN" in r.text, headers
    # no proxy configured (the default): forwarding headers still mean someone forwarded it
    r = httpx.get(f"{process_service.url}/metrics", headers={"X-Real-IP": "203.0.113.5"}, timeout=30)
    assert r.status_code == 403


def _bad_logins(client: httpx.Client, n: int, headers_of) -> list[int]:
    return [
        client.get("/api/v1/me", auth=(f"nokey{i:04d}{time.monotonic_ns()}", "wrong"), headers=headers_of(i)).status_code for i in range(n)
    ]


def test_a_rotating_forwarded_for_does_not_evade_the_login_limit(proxied):
    """130 bad logins with a rotating X-Forwarded-For all got 401: uvicorn believed the header from 127.0.0.1."""
    admin = read_profile_file(proxied.profile)
    with direct(proxied) as me:
        # a direct client's forwarding headers name nobody: every try counts against its own address
        codes = _bad_logins(me, PER_IP + 5, lambda i: {"X-Forwarded-For": f"10.8.{i}.1", "X-Real-IP": f"10.7.{i}.1"})
        assert codes[:PER_IP] == [401] * PER_IP and set(codes[PER_IP:]) == {429}, codes
        assert me.get("/api/v1/me", auth=(admin.access_key, admin.secret_key)).status_code == 200
    with via_proxy(proxied) as proxy:
        # the attacker behind the proxy: nginx sets X-Real-IP to the attacker's address, and passes
        # the attacker's own X-Forwarded-For along untouched
        codes = _bad_logins(proxy, PER_IP + 5, lambda i: {"X-Real-IP": "198.51.100.7", "X-Forwarded-For": f"10.9.{i}.1"})
        assert codes[:PER_IP] == [401] * PER_IP and set(codes[PER_IP:]) == {429}, codes
        # another client behind the same proxy is another address: not refused
        assert _bad_logins(proxy, 1, lambda i: {"X-Real-IP": "198.51.100.8"}) == [401]
        # and the right keys from the attacker's address are served
        ok = proxy.get("/api/v1/me", auth=(admin.access_key, admin.secret_key), headers={"X-Real-IP": "198.51.100.7"})
        assert ok.status_code == 200


def _connections(svc: Service, source: str, n: int) -> list[bytes]:
    """Open n idle connections from ``source``; what each received at once (the 503 if refused)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind((source, 0))
            s.connect(("127.0.0.1", svc.port))
            socks.append(s)
        time.sleep(0.5)
        got = []
        for s in socks:
            s.settimeout(0.3)
            try:
                got.append(s.recv(200))
            except TimeoutError:
                got.append(b"")
        return got
    finally:
        for s in socks:
            s.close()


def test_direct_clients_keep_the_connection_cap_behind_a_proxy(proxied):
    """The README's proxy advice (RAI_CONNECTIONS_PER_ADDRESS=0) left direct clients with no cap at all."""
    assert all(g == b"" for g in _connections(proxied, PROXY, 12))  # the proxy carries many clients
    refused = [g for g in _connections(proxied, "127.0.0.1", 12) if g.startswith(b"HTTP/1.1 503")]
    assert len(refused) == 12 - 5, refused


def test_a_bad_trusted_proxy_setting_stops_the_server(tmp_path):
    env = {**os.environ, "RAI_DATA_DIR": str(tmp_path), "RAI_TRUSTED_PROXIES": "127.0.0.1,nginx"}
    out = subprocess.run(
        [sys.executable, "-m", "raiserver.ops.cli", "serve", "--port", "1"], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode != 0 and "RAI_TRUSTED_PROXIES: 'nginx' is not an IP address" in out.stderr


# -- 4. a known access key and a shared address do not lock a student out -------------------------


def test_the_right_secret_is_served_after_others_failed_with_the_key(process_service):
    """12 wrong tries with a student's access key from the student's address: the right secret got 429."""
    svc = process_service
    prof = svc.add_user("lockout_api")
    p = read_profile_file(prof)
    codes = [httpx.get(f"{svc.url}/api/v1/me", auth=(p.access_key, f"guess-{i}"), timeout=10).status_code for i in range(12)]
    assert codes == [401] * 10 + [429] * 2  # the guesser waits
    for _ in range(2):  # one wrong try after each: the owner is served all the same
        assert httpx.get(f"{svc.url}/api/v1/me", auth=(p.access_key, "guess-x"), timeout=10).status_code == 429
        r = httpx.get(f"{svc.url}/api/v1/me", auth=(p.access_key, p.secret_key), timeout=10)
        assert r.status_code == 200 and r.json()["username"] == "lockout_api"
    res = svc.client("history", env={"RAI_PROFILE": str(prof)})
    assert res.returncode == 0 and "too many failed logins" not in res.stderr, res.stderr


def _login_form(c: httpx.Client, key: str, secret: str) -> httpx.Response:
    csrf = re.search(r'name="csrf" value="([^"]+)"', c.get("/login").text).group(1)
    return c.post("/login", data={"access_key": key, "secret_key": secret, "csrf": csrf})


def test_the_web_login_serves_the_right_secret_after_others_failed(process_service):
    svc = process_service
    p = read_profile_file(svc.add_user("lockout_web"))
    with httpx.Client(base_url=svc.url, timeout=30) as c:
        pages = [_login_form(c, p.access_key, f"guess-{i}") for i in range(12)]
        assert all(r.status_code == 200 for r in pages)
        assert "Too many failed logins" in pages[-1].text and "Too many failed logins" not in pages[0].text
        r = _login_form(c, p.access_key, p.secret_key)
        assert r.status_code == 303 and r.headers["location"] == "/queue", r.text[-500:]
        assert c.get("/api/v1/me").json()["username"] == "lockout_web"


# -- 6. fake ✱ lines behind an invisible character -----------------------------------------------

FORGED = [
    "\u200b✱ Job succeeded in 0.1 s",
    "\u2060✱ Job succeeded in 0.1 s",
    "\ufeff✱ Job succeeded in 0.1 s",
    "\u202e✱ Job succeeded in 0.1 s",
    "\u202e s 1.0 ni dedeeccus boJ ✱",
    "\u200d\u034f\u0301✱ Job succeeded",
    "\u00a0\u3000 \t✱ Job succeeded",
    "\u3164\u2800✱ Job succeeded",
    "\U000e0020\ue000✱ Job succeeded",
    "\x1b[1;36m\u200b✱\x1b[0m Job succeeded",
    "ok\u2028✱ Job succeeded",
    "ok\u2029\u200b✱ Job succeeded",
    "✱ Job succeeded",
]
SHOWS_NOTHING = {"Cc", "Cf", "Cn", "Co", "Cs", "Mn", "Mc", "Me", "Zs", "Zl", "Zp"}


def _visible(line: str) -> str:
    line = re.sub(r"\x1b\[[0-9;:]*m", "", line)
    return "".join(c for c in line if unicodedata.category(c) not in SHOWS_NOTHING and c not in "\u3164\u2800")


def _forged(text: str, own: list[str]) -> list[str]:
    """Lines (as a terminal or browser may break them) that show '✱' first and are not rai's own."""
    return [line for line in text.splitlines() if _visible(line).startswith("✱") and line not in own]


def test_a_job_cannot_print_rais_lines_behind_invisible_characters(process_service, tmp_path):
    svc = process_service
    proj = make_project(
        tmp_path / "forge", ["cat /src/forged.txt", "cat /src/forged.txt >&2"], files={"forged.txt": "\n".join(FORGED) + "\n"}
    )
    res = svc.client("submit", "-p", str(proj))
    assert res.returncode == 0, res.stdout + res.stderr
    own = [line for line in res.stdout.splitlines() if line.startswith("✱ ") and not line.startswith("✱ Job succeeded")]
    assert len(own) >= 5 and res.stdout.splitlines()[-1].startswith("✱ Job succeeded in ")
    last = res.stdout.splitlines()[-1]
    assert _forged(res.stdout, [*own, last]) == [] and _forged(res.stderr, []) == [], (res.stdout, res.stderr)
    assert res.stdout.count("\\") >= len(FORGED) and "\\u202e" in res.stdout  # shown, visibly escaped
    jid = re.search(r"✱ Job (\w+) queued", res.stdout).group(1)
    logs = svc.client("logs", jid)
    assert _forged(logs.stdout, own + [last]) == [] and _forged(logs.stderr, []) == [], logs.stdout
    text = svc.http().get(f"/api/v1/jobs/{jid}/log.txt").text
    assert _forged(text, [line for line in text.splitlines() if line.startswith(("✱ Running: ", "✱ Worker "))]) == []


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed")
def test_the_job_page_shows_no_forged_rai_line(process_service, tmp_path):
    """The web marks rai's lines with '✱' too (the job page's live log): the same rule holds there."""
    from playwright.sync_api import sync_playwright

    svc = process_service
    proj = make_project(tmp_path / "forge-web", ["cat /src/forged.txt"], files={"forged.txt": "\n".join(FORGED) + "\n"})
    res = svc.client("submit", "-p", str(proj))
    assert res.returncode == 0, res.stdout + res.stderr
    jid = re.search(r"✱ Job (\w+) queued", res.stdout).group(1)
    p = read_profile_file(svc.profile)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu", "--no-first-run"])
        try:
            page = browser.new_page()
            page.goto(f"{svc.url}/login")
            page.fill("input[name=access_key]", p.access_key)
            page.fill("input[name=secret_key]", p.secret_key)
            page.click("button[type=submit]")
            page.wait_for_url("**/queue")
            page.goto(f"{svc.url}/jobs/{jid}")
            # polled from here: wait_for_function evaluates a string in the page, which its CSP forbids
            deadline = time.monotonic() + 30
            while page.eval_on_selector_all("#log .l-out", "els => els.length") < len(FORGED) and time.monotonic() < deadline:
                time.sleep(0.2)
            # each line: a div (its number, its time, then its text in .lx), in its command's fold
            rows = page.eval_on_selector_all("#log div[id^=L]", "els => els.map(e => [e.className, e.querySelector('.lx').textContent])")
        finally:
            browser.close()
    job_lines = [text for cls, text in rows if cls != "l-sys"]
    assert len(job_lines) >= len(FORGED)
    assert [t for t in job_lines if any(_visible(line).startswith("✱") for line in t.splitlines())] == [], job_lines
    assert any(t.startswith("\\u202e") for t in job_lines)


# -- 7. shipped safe: file modes, the compose file ------------------------------------------------


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_database_and_stored_files_are_the_servers_alone(process_service, tmp_path):
    """The SQLite database (users' key hashes, the course's labels) was world-readable."""
    svc = process_service
    proj = make_project(tmp_path / "p", ["echo stored > /build/out.txt"])
    assert svc.client("submit", "-p", str(proj)).returncode == 0
    db = svc.data / "rai.sqlite3"
    companions = [db.with_name(db.name + s) for s in ("-wal", "-shm", "-journal")]
    assert db.exists() and any(c.exists() for c in companions)
    for path in [db, *companions]:
        if path.exists():
            assert _mode(path) == 0o600, path
    storage = svc.data / "storage"
    assert _mode(storage) & 0o077 == 0
    files = [p for p in storage.rglob("*") if p.is_file()]
    assert files and all(_mode(p) & 0o077 == 0 for p in files), [(p, oct(_mode(p))) for p in files]


def test_a_readable_database_of_an_earlier_release_is_closed_at_start(tmp_path):
    env = {**os.environ, "RAI_DATA_DIR": str(tmp_path / "data")}
    env.pop("DATABASE_URL", None)
    assert subprocess.run([sys.executable, "-m", "raiserver.ops.cli", "migrate"], env=env, capture_output=True).returncode == 0
    db = tmp_path / "data" / "rai.sqlite3"
    assert _mode(db) == 0o600
    db.chmod(0o644)
    (tmp_path / "data" / "storage").mkdir(mode=0o755)
    subprocess.run([sys.executable, "-m", "raiserver.ops.cli", "migrate"], env=env, capture_output=True, check=True)
    assert _mode(db) == 0o600 and _mode(tmp_path / "data" / "storage") == 0o700


def test_the_secrets_file_is_written_private(tmp_path):
    target = tmp_path / "run" / "secrets.env"
    subprocess.run(
        [sys.executable, "-m", "raiserver.ops.cli", "secrets", "--file", str(target)],
        check=True,
        capture_output=True,
        env={**os.environ, "RAI_DATA_DIR": str(tmp_path / "data")},
    )
    assert _mode(target) == 0o600 and "RAI_SESSION_SECRET=" in target.read_text()


def test_the_compose_file_publishes_on_loopback():
    """It published plain HTTP on 0.0.0.0:8000; a proxy on the host (TLS) is the way in."""
    spec = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    ports = spec["services"]["server"]["ports"]
    assert ports and all(str(p).startswith("127.0.0.1:") for p in ports), ports
    assert "RAI_TRUSTED_PROXIES" in spec["services"]["server"]["environment"]
    docs = [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
    assert all("RAI_CONNECTIONS_PER_ADDRESS=0" not in page.read_text() for page in docs)  # advice that left direct clients uncapped
