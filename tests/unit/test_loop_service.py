"""The background loops: a pass that meets the database or Redis away is one line in the log and
the loop goes on (a traceback every pass of every process during an outage buried the log); any
other failure keeps its traceback; a loop may run its first pass soon after the start."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace

import pytest
import redis
from sqlalchemy import exc

from raiserver.services.loop_service import LoopService


class Flaky(LoopService):
    name = "flaky"

    def __init__(self, errors: list[Exception], **kw: float) -> None:
        super().__init__(SimpleNamespace(), **kw)  # type: ignore[arg-type]
        self.errors, self.passes = errors, 0

    def run_once(self) -> None:
        self.passes += 1
        if self.errors:
            raise self.errors.pop(0)


def run_for(loop: LoopService, seconds: float) -> None:
    async def go() -> None:
        task = asyncio.create_task(loop.start())
        await asyncio.sleep(seconds)
        task.cancel()

    asyncio.run(go())


@pytest.mark.parametrize(
    "error",
    [
        redis.exceptions.ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused."),
        exc.OperationalError("SELECT 1", {}, Exception("server closed the connection")),
    ],
    ids=["redis", "database"],
)
def test_an_outage_is_one_line_and_the_loop_goes_on(caplog, error):
    loop = Flaky([error, error], interval=0.05, first_after=0.0)
    with caplog.at_level(logging.WARNING, logger="raiserver"):
        run_for(loop, 0.5)
    assert loop.passes >= 3  # the two failed passes, then the ones that worked
    skipped = [r for r in caplog.records if r.name == "raiserver"]
    assert [r.getMessage().split(":")[0] for r in skipped] == ["flaky pass skipped", "flaky pass skipped"]
    assert all(r.exc_info is None for r in skipped)


def test_a_bug_keeps_its_traceback(caplog):
    loop = Flaky([KeyError("x")], interval=0.05, first_after=0.0)
    with caplog.at_level(logging.WARNING, logger="raiserver"):
        run_for(loop, 0.3)
    (failed,) = [r for r in caplog.records if r.name == "raiserver"]
    assert failed.getMessage() == "flaky pass failed" and failed.exc_info is not None


def test_the_first_pass_comes_when_asked_not_after_a_whole_interval():
    soon, late = Flaky([], interval=60.0, first_after=0.05), Flaky([], interval=60.0)
    run_for(soon, 0.4)
    run_for(late, 0.4)
    assert (soon.passes, late.passes) == (1, 0)
