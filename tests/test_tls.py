"""Issue 25: the client verifies the server's certificate, on both of its transports (submit's
standard-library one and httpx), and trusts a course's own certificate authority through
RAI_CA_BUNDLE; behind HTTPS the session cookie is Secure. The server here serves HTTPS itself
(`raiserver serve --ssl-certfile/--ssl-keyfile`) with a certificate from a CA made for the test."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from helpers import make_project, start_service

from raiserver.ops import launch

pytestmark = pytest.mark.timeout(180)


def make_ca(d: Path) -> tuple[Path, Path, Path]:
    """A certificate authority and a certificate for 127.0.0.1 signed by it."""

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=rai course test CA",
    )
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1")
    (d / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n")
    openssl(
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
    )
    return d / "ca.pem", d / "server.pem", d / "server.key"


@pytest.fixture(scope="module")
def https_service(tmp_path_factory, redis_url):
    d = tmp_path_factory.mktemp("tls")
    ca, cert, key = make_ca(d)
    port = launch.free_port()
    svc = start_service(d / "svc", redis_url, None, "process", extra_env={"RAI_PUBLIC_URL": f"https://127.0.0.1:{port}"})
    try:
        # the same service on a second, HTTPS port (the worker keeps talking to the plain one)
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
    finally:  # also when starting failed: nothing of the test outlives it
        svc.shutdown()


def client(svc, url: str, *args: str, ca: Path | None = None) -> subprocess.CompletedProcess:
    env = {"RAI_SERVER": url}
    if ca is not None:
        env["RAI_CA_BUNDLE"] = str(ca)
    return svc.client(*args, env=env)


def test_submit_and_history_over_https_trust_the_course_ca(https_service, tmp_path):
    svc, url, ca = https_service
    res = client(svc, url, "submit", "-p", str(make_project(tmp_path / "p", ["echo over tls"])), ca=ca)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "over tls" in res.stdout and f"Submitting as admin @ {url}" in res.stdout
    job = re.search(r"Job (\S+) queued", res.stdout).group(1)
    hist = client(svc, url, "history", ca=ca)
    assert hist.returncode == 0 and job[:6] in hist.stdout, hist.stdout + hist.stderr


def test_an_untrusted_certificate_is_refused_with_a_way_out(https_service, tmp_path):
    svc, url, _ = https_service
    for args in (("submit", "-p", str(make_project(tmp_path / "p", ["echo never"]))), ("history",)):
        res = client(svc, url, *args)
        assert res.returncode != 0
        assert f"the certificate of {url} could not be verified" in res.stderr, res.stderr
        assert "set RAI_CA_BUNDLE to that CA's file (PEM)" in res.stderr and "Traceback" not in res.stderr


def test_the_profile_can_name_the_course_ca(https_service, tmp_path):
    """Issue 48: the CA could be named only in RAI_CA_BUNDLE, set in every shell; a profile the
    course hands out can carry it (``ca_bundle``), and a wrong one is named when refused."""
    import yaml

    svc, url, ca = https_service
    data = yaml.safe_load(Path(svc.profile).read_text())
    data["profile"]["ca_bundle"] = str(ca)
    data["server"] = url
    profile = tmp_path / "course.profile"
    profile.write_text(yaml.safe_dump(data))
    res = svc.client(
        "submit",
        "-p",
        str(make_project(tmp_path / "p", ["echo trusted by the profile"])),
        env={"RAI_PROFILE": str(profile), "RAI_SERVER": url},
    )
    assert res.returncode == 0 and "trusted by the profile" in res.stdout, res.stdout + res.stderr
    data["profile"]["ca_bundle"] = "/etc/ssl/certs/ca-certificates.crt"  # the system's authorities: not the course's
    profile.write_text(yaml.safe_dump(data))
    res = svc.client("history", env={"RAI_PROFILE": str(profile), "RAI_SERVER": url})
    assert res.returncode != 0 and "not signed by the certificate authority in your profile's ca_bundle" in res.stderr, res.stderr


def test_behind_https_the_session_cookie_is_secure(https_service):
    svc, url, ca = https_service
    from raiprotocol.profile import read_profile_file

    p = read_profile_file(svc.profile)
    with httpx.Client(base_url=url, verify=str(ca)) as h:
        csrf = re.search(r'name="csrf" value="([^"]+)"', h.get("/login").text).group(1)
        r = h.post("/login", data={"access_key": p.access_key, "secret_key": p.secret_key, "csrf": csrf})
    cookie = next(v for k, v in r.headers.multi_items() if k.lower() == "set-cookie" and v.startswith("rai_session="))
    assert "secure" in cookie.lower() and "httponly" in cookie.lower(), cookie


def test_the_version_line_checks_the_certificate_too(https_service):
    svc, url, ca = https_service
    res = subprocess.run(
        [sys.executable, "-m", "raiclient", "version"],
        env={**svc.env, "RAI_SERVER": url, "RAI_CA_BUNDLE": str(ca)},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert res.returncode == 0 and "server " + url + ": raiserver" in res.stdout, res.stdout + res.stderr
