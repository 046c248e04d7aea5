"""Issue 34 ("Third hostile review"), items 1, 2 and 5: each attack run against the real service,
failing before the fix. Items 2 and 5 need no Docker (the process executor); item 1's attacks are
on Docker images and run with the Docker executor (``docker_*`` tests)."""

from __future__ import annotations

import io
import socket
import ssl
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from helpers import Service, build_file, read_log, start_service, tar_gz

from raiserver.ops import launch

pytestmark = pytest.mark.timeout(300)


def _make_ca(d: Path) -> tuple[Path, Path, Path]:
    from test_tls import make_ca

    return make_ca(d)


# -- 2. in TLS mode the connection guard acts from the TCP accept -----------------------------------

CAP, HEADER_SECONDS = 50, 2


@pytest.fixture(scope="module")
def https(tmp_path_factory, redis_url) -> Iterator[tuple[Service, str, Path, int]]:
    """A server that serves HTTPS itself (`raiserver serve --ssl-certfile/--ssl-keyfile`), with a
    small connection cap and header deadline."""
    d = tmp_path_factory.mktemp("tls-guard")
    ca, cert, key = _make_ca(d)
    port = launch.free_port()
    svc = start_service(
        d / "svc",
        redis_url,
        None,
        "process",
        worker=False,
        extra_env={"RAI_CONNECTIONS_PER_ADDRESS": str(CAP), "RAI_HEADER_SECONDS": str(HEADER_SECONDS)},
    )
    try:
        command = [*launch.server_command("127.0.0.1", port), "--ssl-certfile", str(cert), "--ssl-keyfile", str(key)]
        part = launch.Part("https", command, svc.env, svc.logs / "https.log").start()
        svc.procs["https"] = part
        url = f"https://127.0.0.1:{port}"

        def up() -> bool:
            try:
                return httpx.get(f"{url}/healthz", verify=str(ca), timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        launch.wait_until(up, part, "https server", timeout=40)
        yield svc, url, ca, port
    finally:
        svc.shutdown()


def _tcp(port: int, source: str = "127.0.0.1") -> socket.socket:
    s = socket.socket()
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    return s


def _closed_within(s: socket.socket, seconds: float) -> bool:
    """Whether the server closes the connection within ``seconds`` (it never sends anything)."""
    s.settimeout(seconds)
    try:
        while s.recv(4096):
            pass
        return True
    except TimeoutError:
        return False
    except OSError:
        return True


class HealthWatch:
    """/healthz over HTTPS every 50 ms from its own thread; the worst latency seen."""

    def __init__(self, url: str, ca: Path):
        self.url, self.ca, self.worst, self.failures = url, ca, 0.0, 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        # from another address than the attack's: the cap is per address
        transport = httpx.HTTPTransport(local_address="127.0.0.3", verify=str(self.ca))
        with httpx.Client(base_url=self.url, transport=transport, timeout=10) as h:
            while not self.stop.wait(0.05):
                start = time.monotonic()
                try:
                    ok = h.get("/healthz").status_code == 200
                except httpx.HTTPError:
                    ok = False
                self.worst = max(self.worst, time.monotonic() - start)
                self.failures += not ok


def test_tls_connections_that_never_handshake_are_capped_and_timed_out(https):
    """1,500 idle TCP connections to the HTTPS server stayed open 41 s and 15,699 were held at once:
    asyncio told the guard of a connection only after its handshake. Now the cap and the header
    deadline act from the TCP accept."""
    svc, url, ca, port = https
    watch = HealthWatch(url, ca)
    watch.thread.start()
    socks: list[socket.socket] = []
    try:
        opened = time.monotonic()
        for _ in range(3 * CAP):
            socks.append(_tcp(port))  # and never a ClientHello
        time.sleep(0.5)
        # past the cap: closed at once (well before the header deadline)
        over = socks[CAP:]
        assert all(_closed_within(s, 0.5) for s in over), "connections past the cap were kept"
        held = socks[:CAP]
        # the rest: closed by the header deadline, counted from the accept
        assert all(_closed_within(s, HEADER_SECONDS + 2) for s in held), "idle TLS connections outlived the deadline"
        assert time.monotonic() - opened < HEADER_SECONDS + 4
        # their places were given back: a real client from the same address is served
        transport = httpx.HTTPTransport(local_address="127.0.0.1", verify=str(ca))
        with httpx.Client(base_url=url, transport=transport, timeout=10) as h:
            assert h.get("/healthz").status_code == 200
    finally:
        watch.stop.set()
        watch.thread.join()
        for s in socks:
            s.close()
    assert watch.failures == 0 and watch.worst < 1.0, f"/healthz: worst {watch.worst:.2f} s, {watch.failures} failures"


def test_tls_handshaken_connections_that_send_no_headers_are_timed_out(https):
    """A handshake and then nothing: the deadline set at accept still runs."""
    svc, url, ca, port = https
    ctx = ssl.create_default_context(cafile=str(ca))
    raw = _tcp(port)
    s = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
    try:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # never the end of the headers
        start = time.monotonic()
        s.settimeout(HEADER_SECONDS + 3)
        try:
            while s.recv(4096):
                pass
        except (ssl.SSLError, OSError):
            pass
        assert time.monotonic() - start < HEADER_SECONDS + 2.5
    finally:
        s.close()


def test_tls_connections_past_the_cap_do_not_leak_places(https):
    """Connections that end in the middle of a handshake give their places back: after many come
    and go, a full cap's worth can still be opened and a request served."""
    svc, url, ca, port = https
    for _ in range(3):
        batch = [_tcp(port) for _ in range(CAP)]
        for s in batch:
            s.sendall(b"\x16\x03\x01\x00\x05")  # the start of a TLS record, then nothing
        for s in batch:
            s.close()
    time.sleep(0.5)
    ctx = ssl.create_default_context(cafile=str(ca))
    held = [_tcp(port) for _ in range(CAP - 1)]
    try:
        transport = httpx.HTTPTransport(local_address="127.0.0.1", verify=str(ca))
        with httpx.Client(base_url=url, transport=transport, timeout=10) as h:
            assert h.get("/healthz").status_code == 200
    finally:
        for s in held:
            s.close()
    del ctx


def test_plain_http_still_gets_the_busy_answer(tmp_path, redis_url):
    """The plain-HTTP guard is unchanged: past the cap a connection gets 503 at once."""
    svc = start_service(
        tmp_path / "plain",
        redis_url,
        None,
        "process",
        worker=False,
        extra_env={"RAI_CONNECTIONS_PER_ADDRESS": "5", "RAI_HEADER_SECONDS": str(HEADER_SECONDS)},
    )
    socks = []
    try:
        for _ in range(5):
            socks.append(_tcp(svc.port))
        time.sleep(0.3)
        extra = _tcp(svc.port)
        socks.append(extra)
        extra.settimeout(2)
        assert extra.recv(4096).startswith(b"HTTP/1.1 503")
        assert all(_closed_within(s, HEADER_SECONDS + 2) for s in socks[:5])
    finally:
        for s in socks:
            s.close()
        svc.shutdown()


# -- 5. a large /build: the server's limit, hard links once, the student's `failed` ---------------

SERVER_BUILD_BYTES = 4 * 1024**2


@pytest.fixture(scope="module")
def builds(tmp_path_factory, redis_url) -> Iterator[Service]:
    """The server stores at most 4 MiB of a build folder; the worker's own limit is far larger."""
    svc = start_service(
        tmp_path_factory.mktemp("builds"),
        redis_url,
        None,
        "process",
        slots=2,
        extra_env={"RAI_MAX_BUILD_BYTES": str(SERVER_BUILD_BYTES), "RAI_BUILD_MB": "64", "RAI_WALL_SECONDS": "60"},
    )
    yield svc
    svc.shutdown()


def _run(svc: Service, commands: list[str], timeout: float = 60) -> tuple[dict, list[dict], float]:
    with svc.http() as h:
        start = time.monotonic()
        r = h.post("/api/v1/jobs", content=tar_gz([], build_file(commands)), headers={"Content-Type": "application/gzip"})
        assert r.status_code == 201, r.text
        jid = r.json()["id"]
        while True:
            job = h.get(f"/api/v1/jobs/{jid}").json()
            if job["state"] not in ("queued", "running"):
                return job, read_log(h, jid), time.monotonic() - start
            assert time.monotonic() - start < timeout, f"job {jid} did not end in {timeout} s"
            time.sleep(0.2)


def test_a_build_over_the_servers_limit_is_the_students_failure_at_once(builds):
    """The worker packed and uploaded what the server would refuse, and the job ended `error` with
    the server's 413. Now the claim carries the server's limit: the job fails, saying why."""
    job, log, took = _run(builds, ["head -c 6000000 /dev/urandom > /build/big", "echo wrote it"])
    assert job["state"] == "failed", job
    assert "the build folder was not kept" in job["message"] and "more than 4 MiB" in job["message"], job
    assert "RAI_MAX_BUILD_BYTES" in job["message"], job
    assert any("the build folder was not kept" in line["text"] for line in log)
    assert any(line["text"] == "wrote it" for line in log)
    assert took < 20, f"took {took:.1f} s"
    with builds.http() as h:  # nothing of it was stored
        assert h.get(f"/api/v1/jobs/{job['id']}/build.tar.gz").status_code == 404


def test_hard_links_in_build_count_once(builds):
    """15,000 hard links to one 200 MB file held a slot 103 s; each link counted as a copy."""
    job, log, took = _run(
        builds, ["head -c 3000000 /dev/urandom > /build/big", "cd /build && for i in $(seq 1 400); do ln big l$i; done", "echo linked"]
    )
    assert job["state"] == "succeeded", (job, log[-3:])  # 1.2 GB if each counted: past RAI_BUILD_MB
    assert took < 30, f"took {took:.1f} s"
    with builds.http() as h:
        r = h.get(f"/api/v1/jobs/{job['id']}/build.tar.gz")
        assert r.status_code == 200 and len(r.content) < SERVER_BUILD_BYTES
    with tarfile.open(fileobj=io.BytesIO(r.content)) as tar:
        members = tar.getmembers()
    assert sum(m.islnk() for m in members) == 400 and sum(m.isreg() for m in members) == 1


def test_the_server_refuses_an_oversized_build_before_reading_it(builds):
    """A 413 from the upload route comes before the body is read, naming the limit (and the worker
    treats it as the student's over-limit, tests/unit/test_ship_build.py)."""
    with builds.http() as h:
        r = h.post("/api/v1/jobs", content=tar_gz([], build_file(["sleep 6"])), headers={"Content-Type": "application/gzip"})
        jid = r.json()["id"]
        deadline = time.monotonic() + 20
        while h.get(f"/api/v1/jobs/{jid}").json()["state"] != "running":
            assert time.monotonic() < deadline
            time.sleep(0.1)
    s = _tcp(builds.port)
    try:
        s.sendall(
            f"PUT /api/v1/worker/jobs/{jid}/build?attempt=1 HTTP/1.1\r\nHost: x\r\n"
            f"Authorization: Bearer {builds.token}\r\nContent-Type: application/gzip\r\n"
            f"Content-Length: {100 * 1024**2}\r\n\r\n".encode()
        )
        s.settimeout(5)
        start, answer = time.monotonic(), ""
        while "RAI_MAX_BUILD_BYTES" not in answer and (chunk := s.recv(65536)):  # headers and body may come apart
            answer += chunk.decode(errors="replace")
        assert time.monotonic() - start < 2
    finally:
        s.close()
    assert answer.startswith("HTTP/1.1 413") and "RAI_MAX_BUILD_BYTES" in answer, answer


# -- 1. staff images: only those published on the worker, by id (Docker) ---------------------------

ANSWERS = b"42 the staff's answers\n"


def _build(engine, tag: str, dockerfile: str) -> str:
    """An image built on the worker host as staff would, from rai/busybox; its id."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in (("Dockerfile", dockerfile.encode()), ("answers.txt", ANSWERS)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    image, _ = engine.images.build(fileobj=buf, custom_context=True, tag=tag, rm=True, pull=False)
    return image.id


DERIVED = "FROM rai/busybox:latest\nCOPY answers.txt /staff/answers.txt\n"
LABELLED_FALSE = 'FROM rai/busybox:latest\nLABEL rai.course="false"\nCOPY answers.txt /staff/answers.txt\n'


def _images(svc: Service) -> str:
    res = svc.client("images")
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


def _read_answers(svc: Service, tmp_path: Path, image: str) -> subprocess.CompletedProcess:
    from helpers import make_project

    return svc.client("submit", "-p", str(make_project(tmp_path / image.replace("/", "_"), ["cat /staff/answers.txt"], image=image)))


def _raiworker(svc: Service, *args: str) -> subprocess.CompletedProcess:
    env = {**svc.env, "RAI_WORK_DIR": str(svc.data / "work-w1"), "RAI_WORKER_NAME": "w1"}
    return subprocess.run([sys.executable, "-m", "raiworker.cli", *args], env=env, capture_output=True, text=True, timeout=60)


def test_docker_staff_images_derived_or_labelled_false_are_neither_offered_nor_run(docker_service, docker_engine, tmp_path):
    """An image labelled rai.course="false" and one built FROM rai/busybox (inheriting its label)
    were both listed by `raiclient images` and ran a student's job that read /staff/answers.txt."""
    from helpers import wait_for

    tags = {"staff/derived:1": DERIVED, "staff/labelled-false:1": LABELLED_FALSE}
    ids = {tag: _build(docker_engine, tag, dockerfile) for tag, dockerfile in tags.items()}
    try:
        wait_for(lambda: "rai/busybox:latest" in _images(docker_service), timeout=20, what="busybox advertised")
        time.sleep(2.5)  # heartbeats come every second: the worker has seen the new images by now
        listed = _images(docker_service)
        for tag, image_id in ids.items():
            assert tag not in listed, listed
            assert image_id not in im_published(docker_service)  # the worker itself would refuse it too
            res = _read_answers(docker_service, tmp_path, tag)
            assert res.returncode != 0 and ANSWERS.decode().strip() not in res.stdout + res.stderr, res.stdout + res.stderr
        # the worker's own check, whatever the server let through: the image is not offered
        from raiworker.config import WorkerSettings
        from raiworker.images import is_offered

        s = WorkerSettings(work_dir=docker_service.data / "work-w1", worker_name="w1")
        assert not any(is_offered(docker_engine.images.get(tag), s) for tag in tags)
        assert is_offered(docker_engine.images.get("rai/busybox:latest"), s)
    finally:
        for tag in tags:
            docker_engine.images.remove(tag, force=True)


def im_published(svc: Service) -> dict:
    from raiworker.images import published

    return published(svc.data / "work-w1")


def test_docker_the_worker_says_why_it_offers_each_image(docker_service):
    log = (docker_service.logs / "worker-w1.log").read_text()
    line = next(ln for ln in log.splitlines() if "offers" in ln and "image(s) to jobs" in ln)
    assert "rai/busybox:latest (" in line and "rai's own busybox image" in line, line


def test_docker_an_operator_publishes_by_id_and_a_retag_does_not_carry_it(docker_service, docker_engine, tmp_path):
    """`raiworker publish` offers exactly the image the name has now; an image built later under
    the same name is not offered; `--withdraw` ends the offer."""
    from helpers import wait_for

    tag = "staff/published:1"
    first = _build(docker_engine, tag, DERIVED)
    try:
        res = _raiworker(docker_service, "publish", tag)
        assert res.returncode == 0 and f"published {tag} (image {first.removeprefix('sha256:')[:12]})" in res.stdout, (
            res.stdout + res.stderr
        )
        wait_for(lambda: tag in _images(docker_service), timeout=20, what="the published image advertised")
        ran = _read_answers(docker_service, tmp_path / "a", tag)  # the operator's choice: it runs
        assert ran.returncode == 0 and ANSWERS.decode().strip() in ran.stdout, ran.stdout + ran.stderr
        swapped = _build(docker_engine, tag, LABELLED_FALSE)  # staff rebuild something else under the name
        assert swapped != first
        wait_for(lambda: tag not in _images(docker_service), timeout=20, what="the retagged name no longer offered")
        assert swapped not in im_published(docker_service)
        res = _raiworker(docker_service, "publish", "--withdraw", first)
        assert res.returncode == 0 and "withdrew" in res.stdout, res.stdout + res.stderr
        assert first not in im_published(docker_service)
    finally:
        docker_engine.images.remove(tag, force=True)


def test_docker_worker_images_are_resolved_to_ids_at_start(docker_service, docker_engine, tmp_path):
    """RAI_WORKER_IMAGES names an image: the one it names when the worker starts is offered; an
    image given that name later is not."""
    from helpers import wait_for

    tag = "staff/named:1"
    _build(docker_engine, tag, DERIVED)
    try:
        docker_service.start_worker("w2", RAI_QUEUES="named", RAI_WORKER_IMAGES=tag)
        wait_for(lambda: tag in _images(docker_service), timeout=20, what="the named image advertised")
        _build(docker_engine, tag, LABELLED_FALSE)
        wait_for(lambda: tag not in _images(docker_service), timeout=20, what="the retagged name no longer offered")
    finally:
        docker_service.stop("worker-w2")
        docker_engine.images.remove(tag, force=True)
