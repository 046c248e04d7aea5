"""Each worker serves Prometheus metrics: jobs by final state (counted in the pool processes that
ran them), log lines, slots, busy slots; on loopback, or elsewhere only with a token."""

from __future__ import annotations

import httpx
import pytest
from helpers import free_port, make_project, wait_for

pytestmark = pytest.mark.timeout(180)


def test_worker_metrics_count_jobs_and_lines(process_service, tmp_path):
    port = free_port()
    process_service.start_worker("wm", RAI_QUEUES="mq", RAI_METRICS_PORT=str(port))
    url = f"http://127.0.0.1:{port}/metrics"
    wait_for(lambda: httpx.get(url, timeout=2).status_code == 200, timeout=20, what="worker /metrics")
    for commands in (["seq 1 50"], ["false"]):
        proj = make_project(tmp_path / commands[0].split()[0], commands)
        process_service.client("submit", "-p", str(proj), "--queue", "mq")
    text = httpx.get(url, timeout=5).text
    assert 'rai_worker_jobs_total{state="succeeded"} 1.0' in text, text
    assert 'rai_worker_jobs_total{state="failed"} 1.0' in text
    lines = next(float(ln.split()[-1]) for ln in text.splitlines() if ln.startswith("rai_worker_log_lines_total"))
    assert lines >= 50
    assert "rai_worker_slots " in text and "rai_worker_busy_slots " in text
    process_service.stop("worker-wm")


def test_worker_metrics_off_loopback_need_a_token(tmp_path, monkeypatch):
    from raiworker.metrics import METRICS_DIR_ENV, serve

    monkeypatch.setenv(METRICS_DIR_ENV, str(tmp_path))

    with pytest.raises(ValueError, match="RAI_METRICS_TOKEN"):
        serve("0.0.0.0", free_port(), "", lambda: {})
    port = free_port()
    server = serve("127.0.0.1", port, "s3cret", lambda: {"slots": 2})
    try:
        assert httpx.get(f"http://127.0.0.1:{port}/metrics").status_code == 401
        ok = httpx.get(f"http://127.0.0.1:{port}/metrics", headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200 and "rai_worker_slots 2.0" in ok.text
    finally:
        server.shutdown()
