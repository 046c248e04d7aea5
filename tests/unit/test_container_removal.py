"""A container whose removal another caller already began (the engine's 409, "removal … is already
in progress": the worker's reaper and a job's recovery at once) is waited for, not a job's error
(CI, 2026-11-29: a crashed worker's job ended in error on it)."""

from __future__ import annotations

import pytest
import requests
from docker.errors import APIError, NotFound

from raiworker.executors.docker.client import remove_container


def conflict() -> APIError:
    response = requests.Response()
    response.status_code = 409
    return APIError("Conflict", response=response, explanation="removal of container x is already in progress")


class Engine:
    def __init__(self, gone_after: int) -> None:
        self.looks, self.gone_after = 0, gone_after

    def remove_container(self, name: str, force: bool, v: bool) -> None:
        raise conflict()

    def inspect_container(self, name: str) -> dict[str, str]:
        self.looks += 1
        if self.looks > self.gone_after:
            raise NotFound("gone")
        return {"Id": name}


def test_a_removal_in_progress_elsewhere_is_waited_for():
    engine = Engine(gone_after=3)
    assert remove_container(engine, "rai-job", wait=5) is True and engine.looks == 4


def test_one_that_never_goes_is_an_error_after_the_wait():
    with pytest.raises(APIError, match="did not end"):
        remove_container(Engine(gone_after=10**6), "rai-job", wait=0.3)


def test_other_errors_and_an_absent_container():
    class Absent(Engine):
        def remove_container(self, name: str, force: bool, v: bool) -> None:
            raise NotFound("no such container")

    assert remove_container(Absent(0), "rai-job") is False

    class Broken(Engine):
        def remove_container(self, name: str, force: bool, v: bool) -> None:
            response = requests.Response()
            response.status_code = 500
            raise APIError("boom", response=response)

    with pytest.raises(APIError) as raised:
        remove_container(Broken(0), "rai-job")
    assert raised.value.status_code == 500  # not waited for: only the engine's 409 is
