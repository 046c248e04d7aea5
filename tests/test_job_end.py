"""A job's end in its container (real engine): one exec stops every process of the job and brings
/build out; the container is then removed after the end is reported, unless a process survived,
in which case it is killed before."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import redis

from conftest import BUSYBOX, wait_for

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def started(docker_engine, redis_url, tmp_path) -> Iterator:
    from raiworker.config import WorkerSettings
    from raiworker.executors.base import JobContext
    from raiworker.executors.docker import DockerExecutor
    from raiworker.logsink import LogSink

    src, build = tmp_path / "src", tmp_path / "build"
    src.mkdir()
    build.mkdir()
    os.chmod(src, 0o755)
    settings = WorkerSettings(work_dir=tmp_path / "work", worker_name=f"end-{os.getpid()}", redis_url=redis_url)
    ctx = JobContext(job_id=f"end{os.getpid()}", image=BUSYBOX, commands=[], src_dir=src, build_dir=build,
                     wall_seconds=60, command_seconds=None, memory_mb=256, gpu_ids=[], settings=settings)
    r = redis.Redis.from_url(redis_url)
    sink = LogSink(r, ctx.job_id, output_bytes=1 << 20, line_bytes=1024)
    ex = DockerExecutor(docker_engine, spares=False)
    ex.start(ctx, sink)
    container = ex.container
    try:
        yield ex, ctx, sink, container
    finally:
        try:
            container.remove(force=True)
        except Exception:  # noqa: BLE001 - already gone: what the tests want
            pass
        r.close()


def _job_processes(container) -> list[str]:
    """Every process but docker-init and the keepalive."""
    rows = container.top()["Processes"]
    return [" ".join(row[-1:]) for row in rows if "docker-init" not in row[-1] and "sleep 2147483647" not in row[-1]]


def test_background_processes_are_stopped_and_build_collected_without_killing_the_container(started):
    ex, ctx, sink, container = started
    code = ex.run_command(ctx, "sh -c 'sleep 1000 & (sleep 1001 &) ; echo 42 > /build/answer'", sink)
    assert code == 0
    assert any("sleep 100" in p for p in _job_processes(container))  # left running by the job
    ex.collect_build(ctx)
    assert (ctx.build_dir / "answer").read_text() == "42\n"
    assert ex.contained and _job_processes(container) == []
    ex.cleanup()
    container.reload()
    assert container.status == "running"  # removed after the end is reported, not before
    ex.tidy()
    from docker.errors import NotFound

    def gone() -> bool:
        try:
            container.reload()
        except NotFound:
            return True
        return False

    wait_for(gone, what="the job's container removed by tidy()")


def test_a_process_the_job_cannot_kill_gets_the_container_killed_before_the_end(started):
    ex, ctx, sink, container = started
    container.exec_run(["sleep", "1002"], user="0", detach=True)  # not the job's user: it survives the job's kill
    wait_for(lambda: any("sleep 1002" in p for p in _job_processes(container)), what="root's sleep")
    assert ex.run_command(ctx, "sh -c 'echo 7 > /build/x'", sink) == 0
    ex.collect_build(ctx)
    assert (ctx.build_dir / "x").read_text() == "7\n"
    assert not ex.contained
    ex.cleanup()
    container.reload()
    assert container.status != "running"
