"""A short soak on the real service (the full one is `python tests/faults/soak.py`, README "Faults"):
students following their jobs while faults come every 8 s; every job's invariants and no leak."""

from __future__ import annotations

import pytest

from .campaign import LEASE, MARGIN
from .soak import Soak, ok, report

pytestmark = [pytest.mark.timeout(900), pytest.mark.own_workers]  # workers faults, faults2 and a Redis of its own


def test_short_soak(tmp_path, docker_engine):
    soak = Soak(tmp_path, students=4, pause=LEASE + MARGIN + 3)  # pauses just past a lease and its margin
    try:
        figures = soak.run(seconds=300, every=8, jobs=120)
    finally:
        soak.c.close()
    print(report(soak, figures))
    assert len(figures.jobs) >= 40 and len(figures.faults) >= 3, report(soak, figures)
    assert ok(soak, figures), report(soak, figures)
