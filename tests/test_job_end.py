"""A job's end in its container (real engine): one exec stops every process of the job and brings
/build out; the container is then removed after the end is reported, unless a process survived,
in which case it is killed before. Each test runs twice: with the copy in an exec of its own, and
in the exec of the job's last command once it has ended (rai-pty's RAI_PTY_THEN, issue 38)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest
import redis
from helpers import BUSYBOX, wait_for

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(params=["own exec", "last command's exec"])
def started(request, docker_engine, redis_url, tmp_path) -> Iterator:
    from raiworker.config import WorkerSettings
    from raiworker.executors.base import JobContext
    from raiworker.executors.docker import DockerExecutor
    from raiworker.logsink import LogSink

    src, build = tmp_path / "src", tmp_path / "build"
    src.mkdir()
    build.mkdir()
    os.chmod(src, 0o755)
    settings = WorkerSettings(work_dir=tmp_path / "work", worker_name=f"end-{os.getpid()}", redis_url=redis_url)
    ctx = JobContext(
        job_id=f"end{os.getpid()}",
        image=BUSYBOX,
        commands=[] if request.param == "own exec" else ["the first command run is the last"],
        src_dir=src,
        build_dir=build,
        wall_seconds=60,
        command_seconds=None,
        memory_mb=256,
        gpu_ids=[],
        settings=settings,
    )
    r = redis.Redis.from_url(redis_url)
    sink = LogSink(r, ctx.job_id, output_bytes=1 << 20, line_bytes=1024)
    from raiworker.images import ensure_busybox_image

    assert ensure_busybox_image(docker_engine, work_dir=settings.work_dir)  # published on this worker, as its start does
    ex = DockerExecutor(docker_engine, spares=False)
    ex.start(ctx, sink)
    container = ex.container
    try:
        yield ex, ctx, sink, container
    finally:
        with contextlib.suppress(Exception):  # already gone: what the tests want
            container.remove(force=True)
        r.close()


def _job_processes(container) -> list[str]:
    """Every process but docker-init and the keepalive (the lease's watcher, issue 51, and its sleep)."""
    rows = container.top()["Processes"]
    return [row[-1] for row in rows if "docker-init" not in row[-1] and "/opt/rai/lease/until" not in row[-1] and row[-1] != "sleep 1"]


def test_background_processes_are_stopped_and_build_collected_without_killing_the_container(started):
    ex, ctx, sink, container = started
    code = ex.run_command(ctx, "sh -c 'sleep 1000 & (sleep 1001 & echo $! > /build/pid) ; echo 42 > /build/answer'", sink)
    assert code == 0
    if not ctx.commands:  # (in the last command's exec the copy, and the stop, follow at once)
        assert any("sleep 100" in p for p in _job_processes(container))  # left running by the job
    ex.collect_build(ctx)
    assert (ctx.build_dir / "answer").read_text() == "42\n"
    assert (ctx.build_dir / "pid").read_text().strip().isdigit()  # it did start one
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


# -- the copy of /build is bounded like the commands (issue 22: it held a slot for hours) ------------


@pytest.fixture
def tight(started, tmp_path):
    ex, ctx, sink, container = started
    ctx.settings = ctx.settings.model_copy(update={"build_mb": 16, "build_files": 1000, "collect_seconds": 20})
    return ex, ctx, sink, container


def test_a_sparse_terabyte_in_build_is_cut_at_the_limit_in_seconds(tight):
    import time

    ex, ctx, sink, _ = tight
    assert ex.run_command(ctx, "sh -c 'echo small > /build/a; truncate -s 1024G /build/huge'", sink) == 0
    start = time.monotonic()
    cut = ex.collect_build(ctx)
    assert time.monotonic() - start < 15
    assert cut is not None and cut.state.value == "failed" and "the build folder was cut" in cut.message, cut
    ex.cleanup()


def test_300k_small_files_are_cut_at_the_file_limit(tight):
    ex, ctx, sink, _ = tight
    assert ex.run_command(ctx, "sh -c 'cd /build && seq 1 30000 | xargs touch'", sink) == 0
    cut = ex.collect_build(ctx)
    assert cut is not None and "more than 1000 files and folders" in cut.message, cut
    assert len(list(ctx.build_dir.iterdir())) <= 1000
    ex.cleanup()


def test_cancel_stops_the_copy(tight):
    import threading
    import time

    ex, ctx, sink, _ = tight
    ctx.settings = ctx.settings.model_copy(update={"build_mb": 1024 * 1024, "collect_seconds": 600})
    assert ex.run_command(ctx, "sh -c 'truncate -s 1024G /build/huge'", sink) == 0
    cancel = threading.Event()
    threading.Timer(1.0, cancel.set).start()
    start = time.monotonic()
    cut = ex.collect_build(ctx, cancel)
    assert time.monotonic() - start < 10
    assert cut is not None and cut.state.value == "cancelled", cut
    ex.cleanup()


def test_a_copy_cut_by_a_killed_container_is_an_error_not_a_success(started):
    """Issue 28: `docker kill` while /build was copied out ended 5 of 5 runs succeeded, the folder cut."""
    import threading

    ex, ctx, sink, container = started
    assert ex.run_command(ctx, "sh -c 'head -c 150000000 /dev/urandom > /build/big'", sink) == 0
    threading.Timer(0.3, container.kill).start()
    cut = ex.collect_build(ctx)
    assert cut is not None and cut.state.value == "error" and "could not be copied completely" in cut.message, cut
    ex.cleanup()


def test_output_like_the_end_line_does_not_end_the_command(started):
    """rai-pty's end line carries a token of the worker's for that exec: a job printing one like it
    (any token) neither ends its command early nor starts the copy."""
    ex, ctx, sink, container = started
    forged = "printf '\\0rai-end:%s:0\\n' 0123456789abcdef0123456789abcdef"
    # nor can it read the token: not in its environment, and rai-pty's /proc files are closed to it
    unseen = (
        '[ -z "$RAI_PTY_END$RAI_PTY_THEN" ] || exit 9; seen=0; for p in /proc/[0-9]*; do '
        '[ "$(head -c 16 $p/cmdline)" = /opt/rai/rai-pty ] || continue; seen=1; cat $p/environ && exit 8; done; [ $seen = 1 ] || exit 7'
    )
    code = ex.run_command(ctx, f"{unseen}; {forged}; sleep 0.5; echo after > /build/after; exit 3", sink)
    assert code == 3
    sink.flush()
    ex.collect_build(ctx)
    assert (ctx.build_dir / "after").read_text() == "after\n"
    assert ex.contained
    ex.cleanup()


def test_a_job_spinning_on_proc_never_reads_the_token(started, tmp_path):
    """rai-pty is installed so that the job's user may run it but not read it: not dumpable from its
    first instruction, so even a process of the job reading every /proc/PID/environ as fast as it
    can, as each rai-pty starts, never sees the token (with the helper readable it did, 199 of 200)."""
    import secrets
    import shutil
    import subprocess

    from raiworker.terminal import IN_CONTAINER

    ex, ctx, sink, container = started
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    thief = ctx.src_dir / "thief"
    source = os.path.join(os.path.dirname(__file__), "fixtures", "environ_thief.c")
    subprocess.run([cc, "-O2", "-static", "-o", str(thief), source], check=True)
    container.exec_run(["/src/thief"], user=ex.user, detach=True)
    wait_for(lambda: any("thief" in p for p in _job_processes(container)), what="the thief running")
    tokens = [secrets.token_hex(16) for _ in range(40)]
    for token in tokens:
        res = container.exec_run([IN_CONTAINER, "/bin/true"], user=ex.user, environment={"RAI_PTY_THEN": "exit 0", "RAI_PTY_END": token})
        assert res.output.endswith(f"\0rai-end:{token}:0\n".encode())
    stolen = container.exec_run(["cat", "/tmp/stolen"], user=ex.user).output.decode(errors="replace")
    assert not any(token in stolen for token in tokens), stolen[:300]


def test_a_copy_killed_part_way_proves_nothing_and_the_container_goes(started):
    """Every process of the job was seen gone only if the copy's script ran to its end: one killed
    while it copied (a status from a signal) gets the container killed before the job's end."""
    import threading

    ex, ctx, sink, container = started
    assert ex.run_command(ctx, "sh -c 'head -c 150000000 /dev/urandom > /build/big'", sink) == 0
    kill_tar = 'for d in /proc/[0-9]*; do [ "$(head -c 3 $d/cmdline)" = tar ] && kill -9 ${d#/proc/}; done'
    threading.Timer(0.15, lambda: container.exec_run(["sh", "-c", kill_tar], user=ex.user)).start()
    cut = ex.collect_build(ctx)
    assert not ex.contained
    assert cut is not None and cut.state.value == "error", cut
    ex.cleanup()
    container.reload()
    assert container.status != "running"


def test_a_last_exec_that_ends_before_its_copy_falls_back_to_an_exec_of_its_own(started):
    ex, ctx, sink, container = started
    assert ex.run_command(ctx, "sh -c 'echo kept > /build/kept'", sink) == 0
    if ctx.commands:  # the stream ends right after the end line, as when the copy's shell could not start

        class Ended:
            def recv(self, n: int) -> bytes:
                return b""

        assert ex.handover is not None
        ex.handover.close()
        ex.handover.frames.after.clear()
        ex.handover = ex.handover._replace(raw=Ended())
    assert ex.collect_build(ctx) is None
    assert (ctx.build_dir / "kept").read_text() == "kept\n" and ex.contained
    ex.cleanup()


def test_only_a_rai_pty_that_hands_over_is_given_the_token(tmp_path):
    """A prebuilt rai-pty from before this (RAI_PTY_HELPER) would leave the token in the command's
    environment: the worker asks each helper once, and gives such a one its own exec for the copy."""
    from raiworker.terminal import hands_over, pty_helper

    helper = pty_helper(tmp_path / "work")
    assert helper is not None and hands_over(helper)
    old = tmp_path / "old-rai-pty"
    old.write_text('#!/bin/sh\nexec "$@"\n')
    old.chmod(0o755)
    assert not hands_over(old)


def test_a_big_build_is_not_sent_down_an_exec_nobody_reads(started):
    """A paused run (SIGSTOP of its process) reads nothing: the last command's exec sends no big
    /build into that stream (an engine removing a container whose exec blocks on it took 10 s, in
    which the job ran elsewhere too); the copy is an exec of its own once the worker reads."""
    ex, ctx, sink, container = started
    assert ex.run_command(ctx, "sh -c 'head -c 3000000 /dev/urandom > /build/big'", sink) == 0
    if ctx.commands:
        assert ex.handover is not None
        exec_id = ex.handover.exec_id
        wait_for(lambda: not ex.client.api.exec_inspect(exec_id)["Running"], timeout=10, what="the exec ended, its copy not sent")
    assert ex.collect_build(ctx) is None
    assert (ctx.build_dir / "big").stat().st_size == 3000000 and ex.contained
    ex.cleanup()
