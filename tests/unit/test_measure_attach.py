"""Issue 23: root's ncu attaches to the launcher with retries, since the launcher takes a moment to
listen; a timed run whose first try came too early but whose retry attached is measured, not
refused (the check once read the whole list of tries instead of the last one)."""

from __future__ import annotations

import time

from raiprotocol.models import TimedRun
from raiworker.executors.docker import KEEP_IN, NCU_ATTACH, READ_PREDICTIONS, DockerExecutor


class Sink:
    def system(self, text: str) -> None:
        pass


def test_a_retry_that_attaches_measures_the_run(monkeypatch):
    ex = DockerExecutor(client=object(), spares=False)
    ex.container = object()
    tries = []

    def exec_as(user: str, script: str, *args: str) -> tuple[int, bytes]:
        if script.startswith(NCU_ATTACH.split("{dir}")[0]) and "--mode attach" in script:
            tries.append(user)
            return (1, b"==ERROR== No attachable process found.") if len(tries) == 1 else (0, b"")
        if script == KEEP_IN:  # the build's result into the timed run's fresh container
            return 0, b""
        if script.startswith("cat /opt/rai/measure/cpu"):  # what rai-timed counted
            return 0, b"1.250\n"
        if script.startswith(READ_PREDICTIONS.split("{")[0]):
            return 0, b"1\n"
        return 0, b"the report's CSV"

    monkeypatch.setattr(ex, "_exec_as", exec_as)
    monkeypatch.setattr(ex, "_run_exec", lambda ctx, argv, user, sink, env=None: time.sleep(1.5) or 0)

    class Ctx:
        job_id = "J"
        gpu_ids: list[str] = []  # no GPU here: NVML is not asked

    run = ex._measure_in(Ctx(), 1, TimedRun(command="./m2", repeats=1, measure="kernels", predictions="p.txt"), Sink())
    assert tries == ["0:0", "0:0"] and run.problem is None and run.report == "the report's CSV" and run.predictions == "1\n"
    assert run.cpu_seconds == 1.25
