"""Issue 46: a ranked job's run containers are made ahead, while the reference runs run. One the
engine has not made in time fails its run and is not made beside it (it is removed once it is
there); the job's end removes every one, used or not, even when the engine fails for some."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from pathlib import Path

from raiworker.executors.docker.cgroup import TimedCgroup
from raiworker.executors.docker.measure import _Place, _Places


class Container:
    def __init__(self, name: str, fails: bool = False) -> None:
        self.id = self.short_id = name
        self.fails = fails
        self.removed = False

    def remove(self, force: bool, v: bool) -> None:
        if self.fails:
            raise ConnectionError("the engine went away")  # requests' errors are not DockerException
        self.removed = True


def place(tmp_path: Path, name: str, fails: bool = False) -> _Place:
    cgroup = TimedCgroup(tmp_path, f"rai-timed-{name}")
    cgroup.folder.mkdir()
    return _Place(cgroup, Container(name, fails))


def test_a_container_not_made_in_time_fails_its_run_and_goes_once_made(tmp_path):
    places = _Places()
    late: Future[_Place] = Future()
    done: Future[_Place] = Future()
    done.set_result(place(tmp_path, "t1"))
    places.ahead = {"t1": done, "t2": late}
    assert places.take("t1") is done.result()
    failed = places.take("t2")
    assert failed is not None and failed.failed is not None and "not made in time" in (failed.failed.problem or "")
    made = place(tmp_path, "t2")
    threading.Thread(target=late.set_result, args=(made,)).start()
    for _ in range(100):
        if made.container.removed and not made.cgroup.folder.exists():  # the container, then its parent
            break
        threading.Event().wait(0.02)
    assert made.container.removed and not made.cgroup.folder.exists()


def test_the_jobs_end_removes_every_run_container_even_when_one_cannot_be(tmp_path):
    places = _Places()
    used = [place(tmp_path, "ref"), place(tmp_path, "t1", fails=True), place(tmp_path, "t2")]
    unused: Future[_Place] = Future()
    unused.set_result(place(tmp_path, "prof"))
    places.used, places.ahead = list(used), {"prof": unused}
    places.remove_all()
    assert [p.container.removed for p in used] == [True, False, True] and unused.result().container.removed
    assert all(not p.cgroup.folder.exists() for p in [*used, unused.result()])  # the parents go all the same
    assert places.used == [] and places.ahead == {}


def test_a_build_that_kept_a_huge_file_has_each_run_container_made_in_its_turn(tmp_path):
    """Each container made ahead holds a copy of the kept files: past AHEAD_BYTES in all (a student's
    program with a 1 GiB array in it), none is made ahead and the host's memory holds one at a time."""
    from raiprotocol.models import TimedRun
    from raiworker.executors.docker.executor import DockerExecutor
    from raiworker.executors.docker.measure import AHEAD_BYTES

    timed = TimedRun(command="./m2", repeats=5, measure="op", reference="./ref", profile="nsys profile ./m2")
    runs = DockerExecutor(client=object(), spares=False)  # type: ignore[arg-type]  # no engine here: nothing is made
    runs.kept_bytes = AHEAD_BYTES // 6 + 1  # six containers' copies: over
    assert runs._make_ahead(None, timed, tmp_path).ahead == {}  # type: ignore[arg-type]
    runs.kept_bytes = AHEAD_BYTES // 6  # under: all six are asked for at once (here each fails: no engine)
    assert set(runs._make_ahead(None, timed, tmp_path).ahead) == {"t1", "t2", "t3", "t4", "t5", "prof"}  # type: ignore[arg-type]
