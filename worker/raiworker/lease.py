"""A run's lease on its job: renewed every heartbeat over HTTP and through Redis (either will do),
from the process that runs the job, not the worker's main process (which may be paused while the
run goes on, or the other way round).

A run that could renew neither for ``worker_dead_after`` stops itself: the server hands the job to
another worker only ``lease_margin`` after it last heard of the run, so the two never run at once.
A run told that another attempt owns the job, or that it ended, stops at once. Each renewal that
went through touches the run's marker file, which the worker's main process watches: a run whose
process is paused (no renewal, no reading of its output) has its container stopped from outside.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from pathlib import Path

import httpx
import redis

from raiprotocol.keys import fence_key, lease_key
from raiprotocol.logwire import RENEW_LUA
from raiprotocol.models import Claim

from .config import WorkerSettings
from .server import tls_context

log = logging.getLogger("raiworker")

SUPERSEDED, LOST = "superseded", "lost"


class Lease(threading.Thread):
    def __init__(self, settings: WorkerSettings, job_id: str, attempt: int, stop: threading.Event, marker: Path):
        super().__init__(name=f"lease-{job_id}", daemon=True)
        self.settings = settings
        self.job_id = job_id
        self.attempt = attempt
        self.stop_run = stop  # set to end the run now (the executor's watchdog kills it)
        self.marker = marker
        self.reason: str | None = None  # SUPERSEDED or LOST once the run must end
        self.reporting = False  # the run's end is being reported: a refusal now is that end, not a superseding
        self._done = threading.Event()
        wait = max(min(settings.heartbeat_seconds, 3.0), 0.5)  # a renewal never blocks past the lease
        self.http = httpx.Client(
            base_url=settings.server_url.rstrip("/"),
            verify=tls_context(),
            timeout=httpx.Timeout(wait, connect=wait),
            headers={"Authorization": f"Bearer {settings.worker_token}"},
        )
        self.redis = redis.Redis.from_url(settings.redis_url, socket_timeout=wait, socket_connect_timeout=wait)
        self._renew = self.redis.register_script(RENEW_LUA)
        self.last_ok = time.monotonic()  # the claim was just granted

    def supersede(self) -> None:
        """Another attempt owns the job, or it ended (the server or the log's fence said so)."""
        self._end(SUPERSEDED)

    def _end(self, reason: str) -> None:
        if self.reporting:
            return
        if self.reason is None:
            self.reason = reason
            log.warning(
                "job %s (attempt %d): %s; stopping the run",
                self.job_id,
                self.attempt,
                "superseded" if reason == SUPERSEDED else "lease lost",
            )
        self.stop_run.set()

    def close(self) -> None:
        self._done.set()
        if self.is_alive() and self is not threading.current_thread():
            self.join(timeout=10)
        self.http.close()
        self.redis.close()

    def run(self) -> None:
        s = self.settings
        while not self._done.wait(s.heartbeat_seconds):
            sent = time.monotonic()
            renewed = self.renew_once()
            if self.reason == SUPERSEDED:
                return
            if renewed:
                self.last_ok = sent
                with contextlib.suppress(OSError):
                    self.marker.touch()
            elif time.monotonic() - self.last_ok > s.worker_dead_after:
                self._end(LOST)  # keeps trying: a late renewal changes nothing, the run is stopped
        return

    def renew_once(self) -> bool:
        """One renewal on both channels: True if either took it."""
        ok = False
        ttl_ms = int((self.settings.worker_dead_after + self.settings.lease_margin) * 1000)
        try:
            answer = int(self._renew(keys=[fence_key(self.job_id), lease_key(self.job_id)], args=[str(self.attempt), ttl_ms]))
            if answer == 0:
                self.supersede()
                return False
            ok = answer == 1
        except redis.RedisError:
            pass
        try:
            resp = self.http.post(
                f"/api/v1/worker/jobs/{self.job_id}/lease", json=Claim(worker=self.settings.worker_name, attempt=self.attempt).model_dump()
            )
            if resp.status_code in (404, 409, 410):
                self.supersede()
                return False
            if resp.status_code == 200:
                ok = True
                if resp.json().get("cancel"):  # as the cancel key in Redis says, through the other channel
                    self.stop_run.set()
        except (httpx.HTTPError, ValueError):
            pass
        return ok
