"""The worker's HTTP client for the server: claims, state changes, archives and build folders.

State changes are retried through a server restart: a finished job must never stay 'running'.
"""

from __future__ import annotations

import functools
import ssl
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from raiprotocol.models import Claim, ClaimGranted, Heartbeat, HeartbeatReply, JobUpdate

from .config import WorkerSettings
from .errors import BuildTooLarge, Refused, ServerTrouble, ServerUnreachable, UploadTooSlow


def _detail(resp: httpx.Response) -> str:
    if resp.headers.get("content-type", "").startswith("application/json"):
        try:
            return str(resp.json().get("detail", resp.text))
        except ValueError:
            pass
    return resp.text[:300]


@functools.cache
def tls_context() -> ssl.SSLContext:
    """One TLS context per process, as httpx would make it (SSL_CERT_FILE, SSL_CERT_DIR, else
    certifi's bundle): httpx makes a new one, loading the whole bundle, for every client, ~18 ms,
    and each job's run made two clients before its command could start (issue 38)."""
    return httpx.create_ssl_context()


class ServerClient:
    def __init__(self, settings: WorkerSettings):
        self.settings = settings
        self.http = httpx.Client(
            base_url=settings.server_url.rstrip("/"),
            verify=tls_context(),
            headers={"Authorization": f"Bearer {settings.worker_token}"},
            timeout=httpx.Timeout(30.0, read=120.0),
        )

    def close(self) -> None:
        self.http.close()

    def _call(
        self, method: str, url: str, retry_for: float = 120.0, on_wait: Callable[[str], None] | None = None, **kw: Any
    ) -> httpx.Response:
        """The request, retried while the server is away (``retry_for``) and, for longer
        (``trouble_seconds``), while it answers that its storage is failing or it is busy (507, 503
        with Retry-After): ``on_wait`` hears the server's reason once, for the job's log."""
        deadline = time.monotonic() + retry_for
        trouble_deadline: float | None = None
        delay = 0.5
        factory = kw.pop("content_factory", None)
        while True:
            trouble: str | None = None
            try:
                if factory is not None:
                    kw["content"] = factory()
                resp = self.http.request(method, url, **kw)
                if resp.status_code in (404, 409, 410):
                    raise Refused(_detail(resp))
                if resp.status_code in (503, 507) and "retry-after" in resp.headers:
                    trouble = _detail(resp)
                    if trouble_deadline is None:
                        trouble_deadline = time.monotonic() + self.settings.trouble_seconds
                        if on_wait is not None:
                            on_wait(trouble)
                    delay = min(max(float(resp.headers["retry-after"]), 1.0), 10.0) if resp.headers["retry-after"].isdigit() else 5.0
                elif resp.status_code < 500:
                    resp.raise_for_status()
                    return resp
            except httpx.TransportError:
                pass
            now = time.monotonic()
            if trouble is not None and trouble_deadline is not None and now > trouble_deadline:
                raise ServerTrouble(f"the server kept answering for {self.settings.trouble_seconds:.0f} s: {trouble} ({method} {url})")
            if trouble is None and now > deadline and (trouble_deadline is None or now > trouble_deadline):
                tried = f" for {retry_for:.0f} s" if retry_for >= 1 else ""  # a heartbeat tries once: its caller says for how long
                raise ServerUnreachable(f"server {self.settings.server_url} unreachable{tried} ({method} {url})")
            time.sleep(delay)
            if trouble is None:
                delay = min(delay * 2, 5.0)

    def heartbeat(self, hb: Heartbeat) -> HeartbeatReply:
        # bounded: a server that does not answer delays the next beat by seconds, not minutes
        wait = max(2 * self.settings.heartbeat_seconds, 5.0)
        resp = self._call("POST", "/api/v1/workers/heartbeat", retry_for=0, json=hb.model_dump(), timeout=httpx.Timeout(wait))
        return HeartbeatReply.model_validate(resp.json())

    def fetch_image(self, sha256: str, dest: Path) -> Path:
        """A `docker save` tar staff uploaded to the server."""
        return self._download(f"/api/v1/worker/images/{sha256}", dest, "image archive", httpx.Timeout(30.0, read=600.0))

    def _download(self, url: str, dest: Path, what: str, timeout: httpx.Timeout | None = None) -> Path:
        with self.http.stream("GET", url, timeout=timeout or httpx.USE_CLIENT_DEFAULT) as resp:
            if resp.status_code != 200:
                resp.read()
                raise Refused(f"{what} not available: HTTP {resp.status_code} {resp.text[:200]}")
            with dest.open("wb") as fh:
                for chunk in resp.iter_bytes(1024 * 1024):
                    fh.write(chunk)
        return dest

    def claim(self, job_id: str, attempt: int) -> ClaimGranted:
        resp = self._call(
            "POST", f"/api/v1/worker/jobs/{job_id}/claim", json=Claim(worker=self.settings.worker_name, attempt=attempt).model_dump()
        )
        return ClaimGranted.model_validate(resp.json())

    def fetch_archive(self, job_id: str, dest: Path) -> Path:
        return self._download(f"/api/v1/worker/jobs/{job_id}/archive", dest, "archive")

    def upload_build(
        self, job_id: str, attempt: int, tarball: Path, on_wait: Callable[[str], None] | None = None, seconds: float | None = None
    ) -> None:
        """Send the packed build folder. Each try of the transfer may take ``seconds`` at most
        (UploadTooSlow past it); waits while the server says its storage is failing are not
        counted. A 413 is BuildTooLarge."""

        def body() -> Iterator[bytes]:
            started = time.monotonic()
            with tarball.open("rb") as fh:
                while chunk := fh.read(1024 * 1024):
                    if seconds is not None and time.monotonic() - started > seconds:
                        raise UploadTooSlow(f"uploading it took more than {seconds:.0f} s")
                    yield chunk

        try:
            self._call(
                "PUT",
                f"/api/v1/worker/jobs/{job_id}/build",
                params={"attempt": attempt},
                content_factory=body,
                on_wait=on_wait,
                headers={"Content-Length": str(tarball.stat().st_size), "Content-Type": "application/gzip"},
            )
        except httpx.HTTPStatusError as exc:
            if exc.response.status_code == 413:
                raise BuildTooLarge(_detail(exc.response)) from None
            raise

    def upload_log(self, job_id: str, attempt: int, spool: Path | None, retry_for: float = 120.0) -> None:
        """The run's own copy of its lines (JSON lines of batches), for the server to make the stored log whole."""
        if spool is None or not spool.exists():
            return

        def body() -> Iterator[bytes]:
            with spool.open("rb") as fh:
                while chunk := fh.read(1024 * 1024):
                    yield chunk

        self._call(
            "PUT",
            f"/api/v1/worker/jobs/{job_id}/log",
            retry_for=retry_for,
            params={"attempt": attempt},
            content_factory=body,
            headers={"Content-Length": str(spool.stat().st_size), "Content-Type": "application/x-ndjson"},
        )

    def update(self, job_id: str, update: JobUpdate, retry_for: float = 600.0) -> None:
        self._call("POST", f"/api/v1/worker/jobs/{job_id}/state", retry_for=retry_for, json=update.model_dump(mode="json"))
