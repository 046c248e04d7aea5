"""The host lock (issue 32): an exclusive (ranked) run waiting for the host is not starved by
ordinary jobs that keep arriving: once it waits, no new job starts until it has run."""

from __future__ import annotations

import threading
import time

from raiworker.gpus import host_share


def job(
    folder,
    order: list[str],
    name: str,
    exclusive: bool = False,
    ranked: bool = False,
    entered: threading.Event | None = None,
    hold: threading.Event | None = None,
    seconds: float = 0.0,
) -> threading.Thread:
    """A job on the host, started: it notes when it has the host and when it lets it go."""

    def run() -> None:
        with host_share(folder, exclusive=exclusive, ranked=ranked):
            order.append(f"{name} in")
            if entered is not None:
                entered.set()
            if hold is not None:
                hold.wait(10)
            time.sleep(seconds)
            order.append(f"{name} out")

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_an_exclusive_run_waiting_is_not_overtaken_by_later_jobs(tmp_path):
    order: list[str] = []
    first_in, release_first = threading.Event(), threading.Event()
    a = job(tmp_path, order, "a", entered=first_in, hold=release_first)
    first_in.wait(5)
    e = job(tmp_path, order, "ranked", exclusive=True, ranked=True, seconds=0.2)
    time.sleep(0.2)  # the ranked run now waits for a
    later = [job(tmp_path, order, f"b{i}", seconds=0.05) for i in range(3)]
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
    d1 = job(tmp_path, order, "d1", exclusive=True, entered=running, hold=release)
    running.wait(5)
    d2 = job(tmp_path, order, "d2", exclusive=True)
    time.sleep(0.3)  # d2 waits for the host first
    r = job(tmp_path, order, "ranked", exclusive=True, ranked=True, seconds=0.1)
    time.sleep(0.3)
    later = [job(tmp_path, order, f"d{i}", exclusive=True) for i in range(3, 6)]
    time.sleep(0.3)
    assert order == ["d1 in"], order  # nobody passes d1 meanwhile
    release.set()
    for t in [d1, d2, r, *later]:
        t.join(10)
    assert order[:4] == ["d1 in", "d1 out", "ranked in", "ranked out"], order
    assert len(order) == 12, order  # and every student's run ran, one at a time
