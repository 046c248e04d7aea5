"""A run's lease on its job: renewed every heartbeat over HTTP and through Redis (either will do),
from the process that runs the job, not the worker's main process (which may be paused while the
run goes on, or the other way round).

A run that could renew neither for ``worker_dead_after`` stops itself: the server hands the job to
another worker only ``lease_margin`` after it last heard of the run, so the two never run at once.
A run told that another attempt owns the job, or that it ended, stops at once.

That stop is the run's own, and freezes with it: a worker paused whole (``docker compose pause``,
a VM stall, SIGSTOP of its process group) kept its job's container running while the job ran
again elsewhere (issue 51). So the lease also holds a *stamp*, a file outside the job's reach
that says until when the job may run (the last renewal sent, plus ``worker_dead_after``), and a
watcher that does not freeze with the worker stops the job's command once that time is past:
root's process in the job's container (Docker), a process in a session of its own (the process
executor), the agent inside the allocation (Slurm). Each tells the run it did
(``Executor.lease_stopped``), and the run ends as a named restart, never as the command's failure.
"""

from __future__ import annotations

import logging
import os
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
from .workdir import drain_file

log = logging.getLogger("raiworker")

SUPERSEDED, LOST, HANDED_BACK = "superseded", "lost", "handed back"

# The watchers' test of the stamp, in sh: true once the job's time is past. The stamp's line is
# "BOOT EPOCH": the deadline on CLOCK_BOOTTIME (/proc/uptime: the host's clock, which a container
# shares and no wall-clock step moves) and on the wall clock (a Slurm node's only clock in common
# with the worker's host). No stamp (a spare container between jobs): not past.
PAST_BOOT_SH = (
    'b=; { read -r b e < "$STAMP"; } 2>/dev/null; read -r up _ < /proc/uptime; '
    'case "$b" in ""|*[!0-9]*) false ;; *) [ "${up%.*}" -ge "$b" ] ;; esac'
)
PAST_EPOCH_SH = 'b=; e=; { read -r b e < "$STAMP"; } 2>/dev/null; case "$e" in ""|*[!0-9]*) false ;; *) [ "$(date +%s)" -ge "$e" ] ;; esac'
LEASE_EXIT = 86  # a watcher's status once it stopped the job: its lease ran out


def start_draining(settings: WorkerSettings) -> None:
    """The worker was asked to stop: its runs may go on for ``drain_seconds`` (each run's lease
    reads this, in whichever process runs it), then they are handed back."""
    tmp = drain_file(settings.work_dir).with_suffix(".tmp")
    tmp.write_text(f"{time.time() + settings.drain_seconds:.3f}\n")
    os.replace(tmp, drain_file(settings.work_dir))


def drain_over(settings: WorkerSettings) -> bool:
    try:
        return time.time() >= float(drain_file(settings.work_dir).read_text())
    except (OSError, ValueError):
        return False


def handed_back_words(settings: WorkerSettings) -> str:
    return (
        f"Worker {settings.worker_name} was asked to stop (an upgrade or a restart) and its runs went on for "
        f"{settings.drain_seconds:g} s (RAI_DRAIN_SECONDS); this one was not done, so it was stopped"
    )


def stopped_words(settings: WorkerSettings) -> str:
    """Why a run its lease's watcher stopped runs again (said once, by the server's requeue line)."""
    return (
        f"Worker {settings.worker_name} renewed no lease on the job for {settings.worker_dead_after:g} s "
        "(it was paused, frozen or cut off), so the job's command was stopped where it ran"
    )


def boot_clock() -> float:
    """Seconds on CLOCK_BOOTTIME, the clock /proc/uptime shows (monotonic, counts suspends)."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def write_stamp(stamp: Path, boot_deadline: float, epoch_deadline: float) -> None:
    """The job may run until these times (rounded down: a watcher errs early, never late); replaced
    whole, so a watcher reads the old line or the new one."""
    stamp.parent.mkdir(parents=True, exist_ok=True)
    tmp = stamp.with_name(f".{stamp.name}.{os.getpid()}")
    tmp.write_text(f"{int(boot_deadline)} {int(epoch_deadline)}\n")
    os.replace(tmp, stamp)


class IdleStamp:
    """Between its jobs a slot's stamp says "this worker lives", renewed while it does: a container
    started ahead for the slot's next job (a spare) watches the same stamp, and with none (as
    before) it ran for ever after its worker died or froze. Paused before a claim, so the job's
    own lease alone decides its stamp (a later idle stamp would let a job outlive its lease)."""

    def __init__(self, stamp: Path, dead_after: float, every: float) -> None:
        self.stamp, self.dead_after, self.every = stamp, dead_after, every
        self._idle = threading.Event()
        self._lock = threading.Lock()  # a stamp being written when the pause comes is done before it returns
        self._thread: threading.Thread | None = None

    def resume(self) -> None:
        """The slot's job is over: its stamp is this worker's, renewed from now."""
        with self._lock:
            self._write()
        self._idle.set()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="idle-stamp", daemon=True)
            self._thread.start()

    def pause(self) -> None:
        """A claim comes: no more idle stamps (the one written stands until the lease's own)."""
        self._idle.clear()
        with self._lock:
            pass

    def _write(self) -> None:
        try:
            write_stamp(self.stamp, boot_clock() + self.dead_after, time.time() + self.dead_after)
        except OSError as exc:  # the last stamp stands: a spare exits at its time, nothing else
            log.warning("the idle stamp %s was not written: %s", self.stamp, exc)

    def _run(self) -> None:
        while True:
            self._idle.wait()
            time.sleep(self.every)
            with self._lock:
                if self._idle.is_set():
                    self._write()


class Lease(threading.Thread):
    def __init__(
        self,
        settings: WorkerSettings,
        job_id: str,
        attempt: int,
        stop: threading.Event,
        stamp: Path,
        granted: tuple[float, float, float] | None = None,
    ):
        super().__init__(name=f"lease-{job_id}", daemon=True)
        self.settings = settings
        self.job_id = job_id
        self.attempt = attempt
        self.stop_run = stop  # set to end the run now (the executor's watchdog kills it)
        self.stamp = stamp  # until when the job may run, for the watchers (``write_stamp``)
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
        # the claim was granted: its request was sent at these times (monotonic, boot, wall), no later
        # than the server's lease began, so the first stamp ends before the server may give the job away
        self.last_ok, boot, wall = granted or (time.monotonic(), boot_clock(), time.time())
        self._stamp(boot, wall)

    def _stamp(self, boot_sent: float, wall_sent: float) -> None:
        try:
            write_stamp(self.stamp, boot_sent + self.settings.worker_dead_after, wall_sent + self.settings.worker_dead_after)
        except OSError as exc:  # the old stamp stands: the job stops at its time, as if cut off
            log.warning("job %s: its lease stamp %s was not written: %s", self.job_id, self.stamp, exc)

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
                reason if reason != LOST else "lease lost",
            )
        self.stop_run.set()

    def close(self) -> None:
        self._done.set()
        if self.is_alive() and self is not threading.current_thread():
            self.join(timeout=10)
        self.stamp.unlink(missing_ok=True)  # until the idle stamp (IdleStamp.resume): the spare watches that one
        self.http.close()
        self.redis.close()

    def run(self) -> None:
        s = self.settings
        while not self._done.wait(s.heartbeat_seconds):
            sent, boot, wall = time.monotonic(), boot_clock(), time.time()
            renewed = self.renew_once()
            if self.reason == SUPERSEDED:
                return
            if self.reason is None and drain_over(s):  # the worker stops: the run goes back in the queue
                self._end(HANDED_BACK)
            if renewed:
                self.last_ok = sent
                if not self._done.is_set():  # closing: the stamp is being removed
                    self._stamp(boot, wall)
            elif time.monotonic() - self.last_ok > s.worker_dead_after:
                self._end(LOST)  # keeps trying: a late renewal changes nothing, the run is stopped
        return

    def renew_once(self) -> bool:
        """One renewal on both channels: True if either took it."""
        ok = False
        ttl_ms = int((self.settings.worker_dead_after + self.settings.lease_margin) * 1000)
        try:
            answer = int(self._renew(keys=[fence_key(self.job_id), lease_key(self.job_id)], args=[str(self.attempt), ttl_ms]))
            if answer == 0 and not self.reporting:
                self.supersede()
                return False
            # reporting: the server raises the fence as it begins to store the end; if it could not
            # store it (its disk full: 507), the job is still this run's, as the HTTP renewal says
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
