"""The host lock (issue 32): an exclusive (ranked) run waiting for the host is not starved by
ordinary jobs that keep arriving: once it waits, no new job starts until it has run."""

from __future__ import annotations

import threading
import time

from raiworker.gpus import host_share


def test_an_exclusive_run_waiting_is_not_overtaken_by_later_jobs(tmp_path):
    order: list[str] = []
    first_in, release_first = threading.Event(), threading.Event()

    def shared(name: str, hold: float, entered: threading.Event | None = None, wait_for: threading.Event | None = None) -> None:
        with host_share(tmp_path, exclusive=False):
            order.append(f"{name} in")
            if entered is not None:
                entered.set()
            if wait_for is not None:
                wait_for.wait(10)
            time.sleep(hold)
            order.append(f"{name} out")

    def exclusive() -> None:
        with host_share(tmp_path, exclusive=True, ranked=True):
            order.append("ranked in")
            time.sleep(0.2)
            order.append("ranked out")

    a = threading.Thread(target=shared, args=("a", 0.0, first_in, release_first))
    a.start()
    first_in.wait(5)
    e = threading.Thread(target=exclusive)
    e.start()
    time.sleep(0.2)  # the ranked run now waits for a
    later = [threading.Thread(target=shared, args=(f"b{i}", 0.05)) for i in range(3)]
    for t in later:
        t.start()
    time.sleep(0.2)
    assert "b0 in" not in order and "ranked in" not in order  # nobody overtakes it; it waits for a alone
    release_first.set()
    for t in [a, e, *later]:
        t.join(10)
    assert order.index("ranked in") == order.index("a out") + 1, order
    assert all(order.index(f"b{i} in") > order.index("ranked out") for i in range(3)), order


def test_a_ranked_run_goes_before_students_exclusive_runs_that_waited_longer(tmp_path):
    """Two students' `exclusive: true` runs: one runs, the other already waits for the host when a
    ranked run comes; more come after it. The ranked run is next once the running one ends (flock
    wakes waiters in no set order: the hostile review saw it wait for both, 15.5 s)."""
    order: list[str] = []
    running, release = threading.Event(), threading.Event()

    def student(name: str, entered: threading.Event | None = None, hold: threading.Event | None = None) -> None:
        with host_share(tmp_path, exclusive=True):
            order.append(f"{name} in")
            if entered is not None:
                entered.set()
            if hold is not None:
                hold.wait(10)
            order.append(f"{name} out")

    def ranked() -> None:
        with host_share(tmp_path, exclusive=True, ranked=True):
            order.append("ranked in")
            time.sleep(0.1)
            order.append("ranked out")

    d1 = threading.Thread(target=student, args=("d1", running, release))
    d1.start()
    running.wait(5)
    d2 = threading.Thread(target=student, args=("d2",))
    d2.start()
    time.sleep(0.3)  # d2 waits for the host first
    r = threading.Thread(target=ranked)
    r.start()
    time.sleep(0.3)
    later = [threading.Thread(target=student, args=(f"d{i}",)) for i in range(3, 6)]
    for t in later:
        t.start()
    time.sleep(0.3)
    assert order == ["d1 in"], order  # nobody passes d1 meanwhile
    release.set()
    for t in [d1, d2, r, *later]:
        t.join(10)
    assert order[:4] == ["d1 in", "d1 out", "ranked in", "ranked out"], order
    assert len(order) == 12, order  # and every student's run ran, one at a time
