"""A pool process's place (issue 32): the pool has one process more than the host has slots, kept
for exclusive runs; a shared job never takes it, and a place comes free when its holder lets go or dies."""

from __future__ import annotations

import multiprocessing
import time

from raiworker.run.places import RESERVED, place


def test_shared_jobs_fill_the_slots_and_leave_the_reserved_place_to_exclusive_runs(tmp_path):
    with place(tmp_path, 2, exclusive=False) as a, place(tmp_path, 2, exclusive=False) as b:
        assert {a, b} == {"place.0.lock", "place.1.lock"}
        with place(tmp_path, 2, exclusive=False, wait=0.1) as c:
            assert c is None  # the third process of a two-slot host: nothing for a shared job
        with place(tmp_path, 2, exclusive=True) as ranked:
            assert ranked == RESERVED
            with place(tmp_path, 2, exclusive=True, wait=0.1) as second:
                assert second is None  # a second exclusive run: every place is held
    with place(tmp_path, 2, exclusive=True) as ranked, place(tmp_path, 2, exclusive=True) as second:
        assert ranked == RESERVED and second == "place.0.lock"  # a free slot serves an exclusive run too


def _hold(path, ready) -> None:
    with place(path, 1, exclusive=False):
        ready.set()
        time.sleep(60)


def test_a_dead_holder_lets_its_place_go(tmp_path):
    ready = multiprocessing.Event()
    holder = multiprocessing.Process(target=_hold, args=(tmp_path, ready))
    holder.start()
    try:
        assert ready.wait(10)
        with place(tmp_path, 1, exclusive=False, wait=0.1) as held:
            assert held is None
        holder.kill()
        holder.join(10)
        with place(tmp_path, 1, exclusive=False) as held:
            assert held == "place.0.lock"
    finally:
        holder.kill()


def test_a_place_let_go_a_moment_later_is_waited_for(tmp_path):
    """The server releases the next job as soon as the last one's end is reported, a moment before
    that job's process lets its place go: the next delivery waits for it rather than going back
    to the queue for seconds."""
    import threading

    with place(tmp_path, 1, exclusive=False) as first:
        assert first == "place.0.lock"
        got: list[str | None] = []

        def take() -> None:
            with place(tmp_path, 1, exclusive=False, wait=5.0) as held:
                got.append(held)

        t = threading.Thread(target=take)
        t.start()
        time.sleep(0.2)
    t.join(5)
    assert got == ["place.0.lock"]
