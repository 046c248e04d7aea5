"""Issue 34, item 5: the build folder's trip to the server is bounded: never more than the server
stores (the claim says how much), never much past the job's collection allowance, and a refusal
is the student's `failed` with a clear line, not the worker's `error`."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from raiprotocol.models import ClaimGranted
from raiworker.config import WorkerSettings
from raiworker.errors import BuildTooLarge, UploadTooSlow
from raiworker.run.job import _ship_build
from raiworker.server import ServerClient


class Sink:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def system(self, text: str) -> None:
        self.lines.append(text)


class Server:
    """What _ship_build asks of the server: an upload that does what the test says."""

    def __init__(self, fail: Exception | None = None) -> None:
        self.fail, self.sent, self.seconds = fail, 0, None

    def upload_build(self, job_id, attempt, tarball: Path, on_wait=None, seconds=None) -> None:
        self.seconds = seconds
        if self.fail is not None:
            raise self.fail
        self.sent = tarball.stat().st_size


def grant(max_build_bytes: int | None) -> ClaimGranted:
    return ClaimGranted(
        job_id="J1", attempt=1, image="x", commands=[], gpu_count=0, archive_sha256="0" * 64, max_build_bytes=max_build_bytes
    )


@pytest.fixture
def build(tmp_path) -> Path:
    b = tmp_path / "job" / "build"
    b.mkdir(parents=True)
    (b / "out.bin").write_bytes(b"z" * (3 * 1024**2))
    return b


def settings(tmp_path: Path, build_mb: int = 64) -> WorkerSettings:
    return WorkerSettings(work_dir=tmp_path / "w", build_mb=build_mb, collect_seconds=30)


def test_the_servers_smaller_limit_wins(tmp_path, build):
    sink, server = Sink(), Server()
    uploaded, why = _ship_build(settings(tmp_path), server, grant(2 * 1024**2), build, sink, time.monotonic() + 30)
    assert not uploaded and server.sent == 0
    assert why == sink.lines[-1]
    assert why.startswith("the build folder was not kept: it holds more than 2 MiB") and "RAI_MAX_BUILD_BYTES" in why


def test_the_workers_smaller_limit_wins(tmp_path, build):
    sink, server = Sink(), Server()
    uploaded, why = _ship_build(settings(tmp_path, build_mb=1), server, grant(1024**3), build, sink, time.monotonic() + 30)
    assert not uploaded and "more than 1 MiB" in why and "RAI_BUILD_MB" in why


def test_within_both_limits_it_is_sent_with_the_time_left(tmp_path, build):
    sink, server = Sink(), Server()
    uploaded, why = _ship_build(settings(tmp_path), server, grant(None), build, sink, time.monotonic() + 100)
    assert uploaded and why is None and server.sent > 0
    assert 90 < server.seconds <= 100


def test_a_413_is_the_students_over_limit(tmp_path, build):
    sink, server = Sink(), Server(BuildTooLarge("the build folder is 3.0 MiB, over the limit of 1.0 MiB (RAI_MAX_BUILD_BYTES)"))
    uploaded, why = _ship_build(settings(tmp_path), server, grant(None), build, sink, time.monotonic() + 30)
    assert not uploaded and why.startswith("the build folder was not kept: the server refused it: the build folder is 3.0 MiB")


def test_a_slow_upload_ends_and_says_so(tmp_path, build):
    sink, server = Sink(), Server(UploadTooSlow("uploading it took more than 30 s"))
    uploaded, why = _ship_build(settings(tmp_path), server, grant(None), build, sink, time.monotonic() + 30)
    assert not uploaded and "uploading it took more than 30 s (RAI_COLLECT_SECONDS)" in why


def test_packing_past_the_deadline_is_cut(tmp_path, build):
    sink, server = Sink(), Server()
    uploaded, why = _ship_build(settings(tmp_path), server, grant(None), build, sink, time.monotonic() - 1)
    assert not uploaded and server.sent == 0 and "packing can do in" in why and "RAI_COLLECT_SECONDS" in why
    assert not (build.parent / "build.tar.gz").exists()


class SlowReader(httpx.BaseTransport):
    """A server that reads a request's body slowly, as it arrives."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        for _ in request.stream:  # type: ignore[union-attr]
            time.sleep(0.2)
        return httpx.Response(200, json={})


def _client(tmp_path: Path, transport: httpx.BaseTransport) -> ServerClient:
    client = ServerClient(settings(tmp_path))
    client.http = httpx.Client(base_url="http://server", transport=transport)
    return client


def test_the_client_stops_an_upload_that_takes_too_long(tmp_path, build):
    tarball = build / "out.bin"
    client = _client(tmp_path, SlowReader())
    start = time.monotonic()
    with pytest.raises(UploadTooSlow, match="uploading it took more than 0 s"):
        client.upload_build("J1", 1, tarball, seconds=0.1)
    assert time.monotonic() - start < 2


def test_the_client_reads_a_413_as_build_too_large(tmp_path, build):
    def refuse(request: httpx.Request) -> httpx.Response:
        return httpx.Response(413, json={"detail": "the build folder is 3.0 MiB, over the limit of 1.0 MiB (RAI_MAX_BUILD_BYTES)"})

    with pytest.raises(BuildTooLarge, match="over the limit of 1.0 MiB"):
        _client(tmp_path, httpx.MockTransport(refuse)).upload_build("J1", 1, build / "out.bin")
