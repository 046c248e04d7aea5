"""The worker's Prometheus ``/metrics``. Jobs run in Celery's forked pool processes, so counters
use prometheus-client's multiprocess mode (a folder of per-process files under the work dir); the
main process serves them with its own gauges (slots, busy, GPUs, images, pulls).

Served on loopback by default (``RAI_METRICS_PORT``, 0 = off); on any other address
(``RAI_METRICS_ADDR``) only with ``Authorization: Bearer $RAI_METRICS_TOKEN``.
"""

from __future__ import annotations

import hmac
import os
import shutil
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, cast
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from .workdir import metrics_dir

METRICS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"


def prepare(work_dir: Path) -> Path:
    """Before prometheus_client is imported anywhere (it reads the variable at import), and before
    the pool forks: a fresh folder for this run's per-process files."""
    folder = metrics_dir(work_dir)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    os.environ[METRICS_DIR_ENV] = str(folder)
    return folder


class _Counters:
    """Created on first use, in whichever process counts."""

    def __init__(self) -> None:
        from prometheus_client import Counter, Histogram

        self.jobs = Counter("rai_worker_jobs_total", "Jobs this worker ran to an end, by final state", ["state"])
        self.run_seconds = Histogram(
            "rai_worker_job_seconds", "From claim to reported end", buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, float("inf"))
        )
        self.log_lines = Counter("rai_worker_log_lines_total", "Output lines shipped to Redis")


_counters: _Counters | None = None


def counters() -> _Counters | None:
    """None when metrics are off (no multiprocess folder): counting then costs nothing."""
    global _counters
    if _counters is None and os.environ.get(METRICS_DIR_ENV):
        _counters = _Counters()
    return _counters


def job_done(state: str, seconds: float) -> None:
    c = counters()
    if c is not None:
        c.jobs.labels(state).inc()
        c.run_seconds.observe(seconds)


def lines_shipped(n: int) -> None:
    c = counters()
    if c is not None and n:
        c.log_lines.inc(n)


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # scrapes every 15 s are not news
        pass


def serve(addr: str, port: int, token: str, gauges: Callable[[], dict[str, float]]) -> WSGIServer:
    """Serve /metrics in a daemon thread; ``gauges`` gives the main process's current values."""
    from prometheus_client import CollectorRegistry, make_wsgi_app
    from prometheus_client.core import GaugeMetricFamily
    from prometheus_client.multiprocess import MultiProcessCollector

    if addr not in ("127.0.0.1", "::1", "localhost") and not token:
        raise ValueError(f"RAI_METRICS_ADDR={addr} is not loopback: set RAI_METRICS_TOKEN too")
    registry = CollectorRegistry()
    cast(Any, MultiProcessCollector)(registry)  # the library leaves it unannotated

    class Live:
        def collect(self) -> Iterator[GaugeMetricFamily]:
            for name, value in gauges().items():
                yield GaugeMetricFamily(f"rai_worker_{name}", name.replace("_", " "), value=value)

    registry.register(Live())
    metrics_app = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if token:
            given = environ.get("HTTP_AUTHORIZATION", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
                start_response("401 Unauthorized", [("Content-Type", "text/plain")])
                return [b"metrics need Authorization: Bearer RAI_METRICS_TOKEN\n"]
        return cast(Iterable[bytes], metrics_app(environ, start_response))

    server = make_server(addr, port, app, handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, name="rai-metrics", daemon=True).start()
    return server
