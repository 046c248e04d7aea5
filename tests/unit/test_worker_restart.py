"""Celery gave up on an error after it was ready (the fault campaign: kombu's restore of unacked
messages met a closed connection when Redis went away), and nobody asked it to stop: `raiworker run`
starts again in place. Asked to stop, or failing before it was ready, it stops."""

from __future__ import annotations

import sys

import pytest

from raiworker import celery_app, cli


@pytest.mark.parametrize(
    ("ready", "asked", "code", "again"),
    [(True, False, 1, True), (True, True, 1, False), (False, False, 1, False), (True, False, 0, False)],
)
def test_the_worker_starts_again_only_after_a_crash_nobody_asked_for(monkeypatch, ready, asked, code, again):
    started: list[list[str]] = []
    monkeypatch.setattr(celery_app, "_ready", ready)
    monkeypatch.setattr(celery_app, "_asked_to_stop", asked)
    monkeypatch.setattr(cli.os, "execv", lambda path, argv: started.append(argv))
    monkeypatch.setattr("time.sleep", lambda s: None)
    monkeypatch.setattr("sys.argv", ["/usr/local/bin/raiworker", "run"])
    cli._start_again_after_a_crash(code)
    assert started == ([[sys.executable, "-m", "raiworker.cli", "run"]] if again else [])
