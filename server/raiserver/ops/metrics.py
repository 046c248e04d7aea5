"""Prometheus metrics at ``/metrics``, the same whichever server process answers the scrape.

What the database knows (jobs by state, queue depth, wait and run times, live workers and GPUs)
is read from it at scrape time. What each process counts (HTTP answers by class, refused
uploads by cause, log lines sent to watchers) goes to Redis hashes every couple of seconds, and
each process's open SSE streams as a gauge with a time stamp, so a scrape sums every process.
Served to loopback only, or to whoever sends ``Authorization: Bearer $RAI_METRICS_TOKEN``; a
request that came through a proxy is never loopback's own (behind nginx on the same host every
request arrives from 127.0.0.1), so it needs the token.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import threading
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import redis
from fastapi import APIRouter, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from raiprotocol.models import GpuInfo, JobState
from raiserver.access.hardening import came_through_proxy, is_loopback
from raiserver.api.deps import ServicesDep
from raiserver.errors import Forbidden
from raiserver.fleet.workers import live_workers
from raiserver.live.counts import ProcessCounts
from raiserver.parts import AppServices, services_of
from raiserver.store.db import SETTLE, Database, utcnow
from raiserver.store.redis_keys import COUNTS, STREAMS
from raiserver.store.tables import Job

log = logging.getLogger("raiserver")
router = APIRouter(include_in_schema=False)

BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, float("inf"))


async def flush_loop(app: FastAPI) -> None:
    svc = services_of(app)
    counts, hub = svc.counts, svc.hub
    while True:
        await asyncio.sleep(2.0)
        lines, hub.lines_sent = hub.lines_sent, 0
        if lines:
            counts.add("log_lines", "sent", lines)
        await run_in_threadpool(counts.flush, svc.redis.sync, hub.open_streams)


class HttpCounts:
    """Counts every answer by status class (2xx, 4xx, 5xx…)."""

    def __init__(self, app: ASGIApp, counts: ProcessCounts):
        self.app, self.counts = app, counts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def counted(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.counts.add("http_responses", f"{message['status'] // 100}xx")
            await send(message)

        await self.app(scope, receive, counted)


@dataclass
class Buckets:
    """A histogram's cumulative counts (one per bound of BUCKETS) and its sum."""

    counts: list[int] = field(default_factory=lambda: [0] * len(BUCKETS))
    total: float = 0.0

    def add(self, value: float) -> None:
        self.total += value
        for i, bound in enumerate(BUCKETS):
            if value <= bound:
                self.counts[i] += 1

    def plus(self, other: Buckets) -> Buckets:
        return Buckets([a + b for a, b in zip(self.counts, other.counts, strict=True)], self.total + other.total)

    def family(self, name: str, doc: str) -> HistogramMetricFamily:
        buckets = [(str(b) if b != float("inf") else "+Inf", n) for b, n in zip(BUCKETS, self.counts, strict=True)]
        return HistogramMetricFamily(name, doc, buckets=buckets, sum_value=self.total)


class JobTimes:
    """The wait and run histograms of every job, kept per process: jobs that ended before a point
    (``SETTLE`` behind the clock: a transaction that ends a job commits within it) are counted once
    and kept; each scrape reads only the jobs that ended after it or have not ended (issue 52: each
    scrape read every job there ever was, 250,000 rows a scrape at the end of a term)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.until: datetime | None = None  # jobs that ended by then are in wait/run
        self.wait, self.run = Buckets(), Buckets()

    def read(self, db: Session) -> tuple[Buckets, Buckets]:
        with self.lock:
            settled = utcnow() - SETTLE
            query = select(Job.created_at, Job.started_at, Job.finished_at).where(Job.started_at.is_not(None))
            if self.until is not None:
                query = query.where(or_(Job.finished_at > self.until, Job.finished_at.is_(None)))
            wait, run = Buckets(), Buckets()
            for created, started, finished in db.execute(query):
                if started is None:
                    continue
                done = finished is not None and finished <= settled
                (self.wait if done else wait).add((started - created).total_seconds())
                if finished is not None:
                    (self.run if done else run).add((finished - started).total_seconds())
            self.until = settled
            return self.wait.plus(wait), self.run.plus(run)


class Collector:
    def __init__(self, svc: AppServices):
        self.svc = svc
        self.svc_times = job_times(svc)

    def collect(self) -> Iterator[Any]:
        settings = self.svc.settings
        r = self.svc.redis.sync
        with self.svc.db.session() as db:
            jobs = GaugeMetricFamily("rai_jobs", "Jobs by state", labels=["state"])
            by_state = dict(db.execute(select(Job.state, func.count()).group_by(Job.state)).all())
            for state in JobState:
                jobs.add_metric([state.value], by_state.get(state, 0))
            yield jobs
            depth = GaugeMetricFamily("rai_queue_depth", "Jobs waiting, per queue", labels=["queue"])
            for queue, n in db.execute(select(Job.queue, func.count()).where(Job.state == JobState.queued).group_by(Job.queue)):
                depth.add_metric([queue], n)
            yield depth
            wait, run = self.svc_times.read(db)
            yield wait.family("rai_job_wait_seconds", "From submission to a worker starting the job")
            yield run.family("rai_job_run_seconds", "From a worker starting the job to its end")
            live = live_workers(db, settings.worker_dead_after)
            yield GaugeMetricFamily("rai_workers_live", "Workers sending heartbeats", value=len(live))
            gpus = GaugeMetricFamily("rai_gpus", "GPUs of live workers", labels=["state"])
            per_gpu = GaugeMetricFamily("rai_gpu_jobs", "Jobs running on each GPU of a live worker (shares held)", labels=["worker", "gpu"])
            shares = GaugeMetricFamily("rai_gpu_shares", "Jobs each GPU may run at once (RAI_JOBS_PER_GPU)", labels=["worker", "gpu"])
            total = busy = 0
            for w in live:
                infos = [GpuInfo.model_validate(g) for g in (w.gpus or [])]
                total += len(infos)
                busy += sum(1 for g in infos if g.jobs) if any(g.shares > 1 or g.jobs for g in infos) else min(w.busy, len(infos))
                for g in infos:
                    per_gpu.add_metric([w.name, str(g.index)], g.jobs)
                    shares.add_metric([w.name, str(g.index)], g.shares)
            gpus.add_metric(["busy"], busy)
            gpus.add_metric(["idle"], total - busy)
            yield gpus
            yield per_gpu
            yield shares
        try:
            counts = r.hgetall(COUNTS)
            streams = r.hgetall(STREAMS)
        except redis.RedisError:
            return
        families = {
            "http_responses": CounterMetricFamily("rai_http_responses", "HTTP answers by status class", labels=["class"]),
            "uploads_refused": CounterMetricFamily("rai_uploads_refused", "Submissions refused, by cause", labels=["cause"]),
            "log_lines": CounterMetricFamily("rai_log_lines", "Log lines sent to live watchers", labels=["what"]),
        }
        for key, n in counts.items():
            name, _, label = key.decode().partition("|")
            if name in families:
                families[name].add_metric([label], int(n))
        yield from families.values()
        now = time.time()
        open_streams = 0
        for _, value in streams.items():
            n, _, at = value.decode().partition("|")
            if now - float(at or 0) < 15:
                open_streams += int(n)
        yield GaugeMetricFamily("rai_sse_watchers", "Open log and queue streams, all server processes", value=open_streams)


_TIMES: weakref.WeakKeyDictionary[Database, JobTimes] = weakref.WeakKeyDictionary()


def job_times(svc: AppServices) -> JobTimes:
    """This process's histograms of ``svc``'s database (one per app: tests make several)."""
    return _TIMES.setdefault(svc.db, JobTimes())


@router.get("/metrics")
def metrics(request: Request, svc: ServicesDep) -> Response:
    token = svc.settings.metrics_token
    given = request.headers.get("authorization", "").removeprefix("Bearer ")
    if token:
        allowed = hmac.compare_digest(given.encode(), token.encode())
    else:
        allowed = is_loopback(request.client.host if request.client else "") and not came_through_proxy(request.scope)
    if not allowed:
        raise Forbidden("metrics are served to loopback (not through a proxy) or with RAI_METRICS_TOKEN")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Collector(svc))
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
