"""A slot starts its next container when a job ends, so the next job does not wait for one: a
fresh container per job (never the previous job's), seeing only its own project, with its own
job id; a job needing another container (here: another memory limit) gets its own, and the spare
one is removed. Real Docker engine, one slot."""

from __future__ import annotations

import contextlib
import signal
import time

import docker.errors
import pytest
from helpers import make_project, start_service, wait_for

pytestmark = pytest.mark.timeout(300)


def spares(engine) -> list[str]:
    """The spare containers' ids (the engine's list as it is: docker-py's containers.list() looks
    each one up again, and one removed in between raised NotFound)."""
    return [row["Id"] for row in engine.api.containers(filters={"label": ["rai.worker=w1", "rai.job=spare"]})]


def submit(svc, proj) -> tuple[str, str]:
    res = svc.client("submit", "-p", str(proj))
    assert res.returncode == 0, res.stdout + res.stderr
    job_id = next(line.split()[2] for line in res.stdout.splitlines() if " queued on " in line)
    return job_id, res.stdout


def test_the_next_job_takes_a_fresh_container_started_ahead(tmp_path, redis_url, docker_engine):
    svc = start_service(tmp_path, redis_url, None, "docker", slots=1)
    try:
        show = "ls -A /src; cat /src/*.txt; echo id=$RAI_JOB_ID; echo host=$(hostname); id -u"
        a, out_a = submit(svc, make_project(tmp_path / "a", [show], files={"a.txt": "secret of A"}))
        assert "Worker w1 started the container (image" in out_a and "secret of A" in out_a
        host_a = next(line for line in out_a.splitlines() if line.startswith("host="))
        spare = wait_for(lambda: spares(docker_engine), what="a spare container after the first job")
        assert len(spare) == 1

        b, out_b = submit(svc, make_project(tmp_path / "b", [show], files={"b.txt": "B's own"}))
        assert "Worker w1 started the container ahead of time (image" in out_b
        assert "secret of A" not in out_b and "a.txt" not in out_b and "B's own" in out_b
        assert f"id={b}" in out_b and "1000" in out_b.splitlines()
        host_b = next(line for line in out_b.splitlines() if line.startswith("host="))
        assert host_b != host_a and host_b == f"host={spare[0][:12]}"
        # another one waits, and B's container is gone (removed once the next one is made, in the
        # background, within seconds): never the same container twice
        wait_for(lambda: [c for c in spares(docker_engine) if c != spare[0]], what="the next spare")

        def gone() -> bool:
            return spare[0] not in {row["Id"] for row in docker_engine.api.containers(all=True, filters={"label": "rai.worker=w1"})}

        wait_for(gone, timeout=10, what="B's container removed")
        with svc.http() as h:
            phases = [p["name"] for p in h.get(f"/api/v1/jobs/{b}").json()["phases"]]
        assert "container started" in phases

        c, out_c = submit(svc, make_project(tmp_path / "c", ["echo small"], extra="resources:\n  limits:\n    memory_mb: 96\n"))
        assert "Worker w1 started the container (image" in out_c and "ahead of time" not in out_c
    finally:
        svc.shutdown()
    # the worker's end removes its spare
    assert spares(docker_engine) == []


def test_a_spare_container_ends_when_its_worker_dies(tmp_path, redis_url, docker_engine):
    """A spare waits for a job that only its worker can give it: killed (a box's worker gone, not
    restarted), the spare stops within the worker's dead-after time, as a job's container does when
    its lease lapses. It used to run for ever (it had no stamp to watch)."""
    svc = start_service(tmp_path, redis_url, None, "docker", slots=1)
    try:
        job, out = submit(svc, make_project(tmp_path / "a", ["echo first"]))
        assert "first" in out
        spare = wait_for(lambda: spares(docker_engine), what="a spare container after the first job")[0]
        time.sleep(8)  # longer than RAI_WORKER_DEAD_AFTER (6): a living worker's spare stays up
        assert docker_engine.api.inspect_container(spare)["State"]["Running"], "a living worker's spare stopped"
        svc.stop("worker-w1", signal.SIGKILL)
        killed = time.monotonic()

        def stopped() -> bool:
            try:
                return not docker_engine.api.inspect_container(spare)["State"]["Running"]
            except docker.errors.NotFound:
                return True

        wait_for(stopped, timeout=30, what="the dead worker's spare container to stop")
        took = time.monotonic() - killed
        # the dead worker never comes back under its name (its container made anew, its folder gone):
        # another worker on the host removes the stopped spare, which nothing else would
        with contextlib.suppress(docker.errors.NotFound):  # else removed already, by another session's worker on this engine
            assert docker_engine.api.inspect_container(spare)["State"]["ExitCode"] == 86
        svc.start_worker("w2")

        def removed() -> bool:
            try:
                docker_engine.api.inspect_container(spare)
            except docker.errors.NotFound:
                return True
            return False

        wait_for(removed, timeout=20, what="the dead worker's stopped spare removed by another worker")
    finally:
        svc.shutdown()
        for name in ("w1", "w2"):
            for row in docker_engine.api.containers(all=True, filters={"label": f"rai.worker={name}"}):
                docker_engine.api.remove_container(row["Id"], force=True)
    assert took < 6 + 5, f"the spare ran {took:.0f} s past its worker's death"
