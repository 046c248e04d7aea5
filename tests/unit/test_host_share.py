"""The host lock (issue 32): an exclusive (ranked) run waiting for the host is not starved by
ordinary jobs that keep arriving: once it waits, no new job starts until it has run."""

from __future__ import annotations

import threading
import time

from raiworker.gpu.holds import host_share


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


def test_between_its_timed_runs_a_ranked_run_lets_the_jobs_waiting_then_run_first(tmp_path):
    """Issue 46: another student's job waits for one timed run, not for the whole ranked job. The
    jobs waiting when the ranked run is between two timed runs go first, on its GPU too; the ranked
    run then has the host and the same GPU alone again; a job that came later waits for its end."""
    from raiprotocol.models import GpuInfo
    from raiworker.gpu.holds import hold_gpus

    order: list[str] = []
    gpus = [GpuInfo(index=0, name="g", memory_mb=1)]
    waiting_then, later_started = threading.Event(), threading.Event()

    def dev(name: str, seconds: float) -> None:
        with host_share(tmp_path, exclusive=False), hold_gpus(tmp_path, gpus, 1, wait=10) as got:
            order.append(f"{name} in on {got[0]}")
            time.sleep(seconds)
            order.append(f"{name} out")

    def ranked() -> None:
        with host_share(tmp_path, exclusive=True, ranked=True) as host, hold_gpus(tmp_path, gpus, 1) as mine:
            assert not host.let_waiting_in(mine)  # nobody waits: nothing to let in, at once
            order.append("run 1")
            waiting_then.set()
            time.sleep(0.4)  # d1 and d2 arrive during run 1 and wait
            assert host.let_waiting_in(mine, lambda: order.append("lets them in"))
            later_started.set()
            order.append(f"run 2 on {mine[0]}")
            time.sleep(0.4)  # d3 arrives during run 2: it waits for the ranked run's end
            order.append("ranked out")

    r = threading.Thread(target=ranked)
    r.start()
    waiting_then.wait(5)
    d = [threading.Thread(target=dev, args=(f"d{i}", 0.2)) for i in (1, 2)]
    for t in d:
        t.start()
    later_started.wait(10)
    d3 = threading.Thread(target=dev, args=("d3", 0.0))
    d3.start()
    for t in [r, *d, d3]:
        t.join(15)
    assert order[:2] == ["run 1", "lets them in"], order
    between = order[2 : order.index("run 2 on 0")]
    assert sorted(between) == ["d1 in on 0", "d1 out", "d2 in on 0", "d2 out"], order  # both ran, and ended, in between
    assert order[-3:] == ["ranked out", "d3 in on 0", "d3 out"], order


def test_a_ranked_run_goes_on_only_once_the_jobs_it_let_in_have_sent_their_build_and_gone(tmp_path):
    """The hostile review: a job let in between two timed runs packed and sent its build folder, and
    its container was removed, after it let the host go: during the ranked run's next timed run. It
    holds the host's tail until then, and the ranked run waits for the tail too."""
    import os

    order: list[str] = []
    running, let_in = threading.Event(), threading.Event()

    def dev() -> None:
        with host_share(tmp_path, exclusive=False) as host:
            tail = host.keep_tail()
            order.append("dev runs")
        time.sleep(0.4)  # its build folder sent, its container removed: after the host went
        order.append("dev tidied")
        os.close(tail)

    def ranked() -> None:
        with host_share(tmp_path, exclusive=True, ranked=True) as host:
            running.set()
            let_in.wait(5)
            time.sleep(0.2)
            host.let_waiting_in()
            order.append("next timed run")

    r = threading.Thread(target=ranked)
    r.start()
    running.wait(5)
    d = threading.Thread(target=dev)
    d.start()
    let_in.set()
    for t in (r, d):
        t.join(10)
    assert order == ["dev runs", "dev tidied", "next timed run"], order


def test_a_ranked_run_cancelled_while_it_waits_for_the_host_ends_at_once(tmp_path):
    """A cancelled ranked run waiting for a long job to end stayed 'running' (and counted among its
    student's jobs) until that job ended: the wait now looks at the cancel every 50 ms."""
    import pytest

    from raiworker.gpu.holds import Stopped

    cancelled = threading.Event()
    held, release = threading.Event(), threading.Event()
    long_job = job(tmp_path, [], "long", entered=held, hold=release)
    held.wait(5)
    threading.Timer(0.3, cancelled.set).start()
    started = time.monotonic()
    with pytest.raises(Stopped), host_share(tmp_path, exclusive=True, ranked=True, stopped=cancelled.is_set):
        pass
    assert time.monotonic() - started < 1.0
    release.set()
    long_job.join(5)
