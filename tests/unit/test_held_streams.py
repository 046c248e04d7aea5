"""A stream's slot (``LogHub.admit``) comes back exactly once however its answer ends (the hostile
review of 2026-11-29): sent whole, the client gone before the first byte (a server that raises on a
dead connection, as ASGI 2.4 allows), or the answer cancelled before its body's first chunk. Before,
the slot was given back by the body generator's own ``finally``, which a generator never started
never runs: a student's 10 such leaked slots locked them out of their logs, and 500 students' the
whole process."""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from raiserver.api.logstream import HeldEventSourceResponse, HeldFileResponse, HeldStreamingResponse
from raiserver.live.feed import LogHub


def hub() -> LogHub:
    return LogHub(None, lambda ids: {}, per_student=10, per_staff=10, per_process=100, buffer_lines=10)  # type: ignore[arg-type]


async def body() -> AsyncIterator[Any]:
    for _ in range(3):
        await asyncio.sleep(0)
        yield b"x" * 1000


async def events() -> AsyncIterator[Any]:
    for i in range(3):
        await asyncio.sleep(0)
        yield {"event": "lines", "data": str(i)}


def make(kind: str, h: LogHub, tmp: Path) -> Any:
    h.admit(1, False)
    release = lambda: h.release(1)  # noqa: E731
    if kind == "text":
        return HeldStreamingResponse(body(), release=release, media_type="text/plain")
    if kind == "events":
        return HeldEventSourceResponse(events(), release=release, ping=15, send_timeout=5)
    f = tmp / "build.tar.gz"
    f.write_bytes(b"\x1f\x8b" + b"0" * 200_000)
    return HeldFileResponse(f, release=release, media_type="application/gzip")


SCOPE = {
    "type": "http",
    "asgi": {"version": "3.0", "spec_version": "2.4"},
    "http_version": "1.1",
    "method": "GET",
    "path": "/",
    "raw_path": b"/",
    "query_string": b"",
    "headers": [],
    "extensions": {},
}


async def run(response: Any, how: str) -> None:
    gone = asyncio.Event()

    async def receive() -> dict[str, Any]:
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if how == "client gone":  # ASGI 2.4: a send on a closed connection raises
            raise OSError("the client is gone")
        if how == "cancelled" and message["type"] == "http.response.start":
            await asyncio.sleep(10)  # the headers stall (a reader that does not read): cancelled meanwhile
        await asyncio.sleep(0)

    task = asyncio.ensure_future(response(dict(SCOPE), receive, send))
    if how == "cancelled":
        await asyncio.sleep(0.05)
        task.cancel()
    with contextlib.suppress(Exception, asyncio.CancelledError):  # however the answer ended: the slot is what is asserted
        await asyncio.wait_for(task, 10)
    gone.set()


@pytest.mark.parametrize("kind", ["text", "events", "file"])
@pytest.mark.parametrize("how", ["sent whole", "client gone", "cancelled"])
def test_a_streams_slot_comes_back_once_however_it_ends(kind: str, how: str, tmp_path: Path) -> None:
    h = hub()

    async def main() -> None:
        for _ in range(12):  # past the cap of 10 a student: a leak would refuse the 11th
            await run(make(kind, h, tmp_path), how)

    asyncio.run(main())
    gc.collect()
    assert h.open_streams == 0 and dict(h.streams) == {}, (h.open_streams, dict(h.streams))


def test_a_build_folder_deleted_after_the_route_looked_is_not_found_and_gives_its_slot_back(tmp_path: Path) -> None:
    """Retention or the owner's delete between the route's look and the sending: a 404 (the route's
    error), not the engine's 500 and its traceback."""
    from raiserver.errors import NotFound

    h = hub()
    response = make("file", h, tmp_path)
    (tmp_path / "build.tar.gz").unlink()
    with pytest.raises(NotFound):
        asyncio.run(response(dict(SCOPE), None, None))
    assert h.open_streams == 0
