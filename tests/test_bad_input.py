"""Bad input gets one clear line and nothing is lost: client refuses early, server agrees."""

from __future__ import annotations

import os
import tarfile

import pytest
from helpers import free_port, make_project, tar_gz

pytestmark = pytest.mark.timeout(120)


def raw_tar(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    return tar_gz(members, spec=None)  # the build file, if any, is one of the members


def spec_member(text: bytes) -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo("rai_build.yml"), text


GOOD = b"rai:\n  image: rai/busybox:latest\ncommands:\n  build:\n    - echo hi\n"


@pytest.mark.parametrize(
    "text, message",
    [
        (None, "rai_build.yml: not found"),
        ("rai:\n  image: x\ncommands:\n  build: [unclosed\n", "rai_build.yml:4: malformed YAML"),
        ("rai:\n  image: x\ncommands:\n  build: echo hi\n", "rai_build.yml:4: commands.build must be a list of strings"),
        ("rai:\n  image: x\n  colour: red\ncommands:\n  build: [echo]\n", "rai_build.yml:3: rai.colour is not a known field"),
        ("rai:\n  image: x\ncommands:\n  build: []\n", "rai_build.yml:4: commands.build must not be empty"),
        (
            "rai:\n  image: x\ncommands:\n  build:\n    - sh -c 'echo \"m2.cu(12): error: x\"'\n",
            "rai_build.yml:5: malformed YAML at column 29: a ': ' inside a value makes YAML read it as a key; put the whole "
            "value in quotes: - 'sh -c ''echo \"m2.cu(12): error: x\"'''",
        ),
    ],
)
def test_a_bad_build_file_is_one_line_and_no_job_and_a_big_project_is_refused_before_upload(docker_service, tmp_path, text, message):
    proj = tmp_path / "p"
    proj.mkdir()
    if text is not None:
        (proj / "rai_build.yml").write_text(text)
    with docker_service.http() as h:
        before = len(h.get("/api/v1/jobs", params={"limit": 500}).json()["jobs"])
    # a small project goes up at once and the server, which checks anyway, answers the same line
    res = docker_service.client("submit", "-p", str(proj))
    assert res.returncode == 2
    assert message in res.stderr and "Traceback" not in res.stderr
    assert "Uploading" not in res.stdout and "queued on" not in res.stdout
    # a big one is checked here first: the client refuses without reaching any server
    (proj / "weights.bin").write_bytes(__import__("os").urandom(1_200_000))
    res = docker_service.client("submit", "-p", str(proj), env={"RAI_SERVER": f"http://127.0.0.1:{free_port()}"})
    assert res.returncode == 2
    assert message in res.stderr and "cannot reach" not in res.stderr and "Traceback" not in res.stderr
    with docker_service.http() as h:
        assert len(h.get("/api/v1/jobs", params={"limit": 500}).json()["jobs"]) == before
        if text is not None:  # a raw request that bypasses the client gets the same text
            r = h.post("/api/v1/jobs", content=raw_tar([spec_member(text.encode())]), headers={"Content-Type": "application/gzip"})
            assert r.status_code == 422
            assert message in r.json()["detail"]


@pytest.mark.parametrize(
    "name, kind, link, expected",
    [
        ("../../x", tarfile.REGTYPE, "", "entry '../../x': '..' in paths is not allowed"),
        ("/etc/x", tarfile.REGTYPE, "", "entry '/etc/x': absolute paths are not allowed"),
        ("pw", tarfile.SYMTYPE, "/etc/passwd", "entry 'pw': symlink to an absolute path (/etc/passwd) is not allowed"),
        ("up", tarfile.SYMTYPE, "../..", "entry 'up': symlink points outside the project (../..)"),
        ("null", tarfile.CHRTYPE, "", "entry 'null': device files, FIFOs and other special files are not allowed"),
    ],
)
def test_unsafe_archive_entries_get_400_naming_the_entry(docker_service, name, kind, link, expected):
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    body = raw_tar([spec_member(GOOD), (info, b"x" if kind == tarfile.REGTYPE else None)])
    with docker_service.http() as h:
        r = h.post("/api/v1/jobs", content=body, headers={"Content-Type": "application/gzip"})
    assert r.status_code == 400
    assert r.json()["detail"] == expected


def test_oversized_upload_is_refused_before_it_is_read(tmp_path, redis_url):
    from helpers import start_service

    svc = start_service(tmp_path, redis_url, None, "process", worker=False, extra_env={"RAI_MAX_UPLOAD_BYTES": "100000"})
    try:
        import socket

        from raiprotocol.profile import read_profile_file

        prof = read_profile_file(svc.profile)
        auth = __import__("base64").b64encode(f"{prof.access_key}:{prof.secret_key}".encode()).decode()
        host, port = svc.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            # announce 640 MB, send 64 KiB, and wait: the answer must come without the rest
            sock.sendall(
                f"POST /api/v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {auth}\r\n"
                f"Content-Type: application/gzip\r\nContent-Length: 655360000\r\n\r\n".encode()
                + b"\0" * 65536
            )
            reply = b""
            while b"}" not in reply:  # headers and the JSON body may come in separate packets
                chunk = sock.recv(4096)
                if not chunk:
                    break
                reply += chunk
            reply = reply.decode()
        assert reply.startswith("HTTP/1.1 413"), reply
        assert "the limit is 97.7 KiB" in reply
        with svc.http() as h:
            # without a Content-Length the server counts and stops
            r = h.post("/api/v1/jobs", content=(b"\0" * 65536 for _ in range(100)))
            assert r.status_code == 413
        big = make_project(tmp_path / "big", ["echo"], files={"blob.txt": __import__("os").urandom(300_000).hex()})
        res = svc.client("submit", "-p", str(big))
        assert res.returncode == 2 and "limit" in res.stderr and "Traceback" not in res.stderr
    finally:
        svc.shutdown()


def test_unreachable_server_and_wrong_credentials_are_one_line(docker_service, tmp_path):
    proj = make_project(tmp_path / "p", ["echo hi"])
    res = docker_service.client("submit", "-p", str(proj), env={"RAI_SERVER": f"http://127.0.0.1:{free_port()}"})
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0 and "cannot reach the rai server" in res.stderr
    bad = tmp_path / "bad.profile"
    bad.write_text(f"profile:\n  username: eve\n  access_key: nope\n  secret_key: nope\nserver: {docker_service.url}\n")
    res = docker_service.client("submit", "-p", str(proj), env={"RAI_PROFILE": str(bad)})
    assert res.returncode == 2
    assert "the server rejected your credentials" in res.stderr and "Traceback" not in res.stderr
    res = docker_service.client("submit", "-p", str(proj), env={"RAI_PROFILE": str(tmp_path / "missing")})
    assert res.returncode == 2 and "no credentials" in res.stderr


@pytest.mark.parametrize(
    "filler, words", [("random", "MiB packed (the limit is 200.0 MiB)"), ("zeros", "(files of zeros or filler?) (the limit is 200x)")]
)
def test_a_too_big_project_is_refused_at_once_naming_its_largest_files(docker_service, tmp_path, filler, words):
    """Issue 26: a 300 MB file was packed for 7 s before a refusal that named no file and did not
    mention .raiignore; a zero-filled file was called 'a compression bomb?'."""
    import time

    proj = make_project(tmp_path / "p", ["true"])
    with (proj / "dataset.bin").open("wb") as fh:
        if filler == "random":
            for _ in range(250):
                fh.write(os.urandom(1024**2))
        else:
            fh.truncate(250 * 1024**2)
    start = time.monotonic()
    res = docker_service.client("submit", "-p", str(proj))
    took = time.monotonic() - start
    assert res.returncode != 0 and words in res.stderr, res.stderr
    assert "dataset.bin" in res.stderr and ".raiignore" in res.stderr and "bomb" not in res.stderr, res.stderr
    assert "Packing project" not in res.stdout and took < 5, (took, res.stdout)  # refused before packing
    (proj / ".raiignore").write_text("dataset.bin\n")  # the advice works
    res = docker_service.client("submit", "-p", str(proj))
    assert res.returncode == 0, res.stdout + res.stderr
