"""The events of one reader's log stream (Server-Sent Events): the stored log from disk for a
finished job, else what Redis holds so far, then the live batches the hub hands this watcher, with
status while queued and ``end`` with the job. The route only authorises and opens it."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, StreamingResponse
from pydantic import BaseModel
from sse_starlette.sse import EventSourceResponse
from starlette.types import Receive, Scope, Send

from raiprotocol import logwire
from raiprotocol.logwire import END, Batch
from raiprotocol.models import JobOut, JobState
from raiserver.errors import NotFound
from raiserver.live.feed import LogHub, Shared, Watcher
from raiserver.live.logs import PAGE_ENTRIES
from raiserver.parts import Services
from raiserver.store.redisconn import REDIS_AWAY

log = logging.getLogger("raiserver")

STATUS_FIELDS = {"state", "position", "eta_seconds", "eta_low", "eta_high", "eta_guess", "position_why", "worker"}


def sse_json(model: BaseModel, **kw: Any) -> str:
    """JSON with every non-ASCII character escaped: an SSE data field is split at any Unicode line
    break (U+2028, NEL…), which job output may well contain."""
    return json.dumps(model.model_dump(mode="json", **kw))


class _Held:
    """An answer that holds one of its caller's stream slots (``LogHub.admit``, taken by the route):
    given back in the answer's own ``__call__``, however the sending ends (sent, the client gone,
    cancelled, an error), and its body iterator closed there. (A generator's own ``finally`` is not
    enough: a generator never started, cancelled before its first chunk, never runs it, and one
    abandoned mid-send waits for the garbage collector: the hostile review of 2026-11-29.)"""

    _release: Callable[[], None]
    body_iterator: Any

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self._ready()
            await super().__call__(scope, receive, send)  # type: ignore[misc]
        finally:
            aclose = getattr(getattr(self, "body_iterator", None), "aclose", None)
            try:
                if aclose is not None:
                    with anyio.move_on_after(5, shield=True):
                        await aclose()
            finally:
                self._release()

    async def _ready(self) -> None:
        """What must hold before the answer starts (an error raised here is answered as such)."""


class HeldFileResponse(_Held, FileResponse):
    def __init__(self, path: Path, *, release: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(path, **kwargs)
        self._release = release

    async def _ready(self) -> None:
        if not await anyio.Path(self.path).is_file():  # deleted since the route looked (retention, the owner)
            raise NotFound("this job's build folder was deleted")


class HeldStreamingResponse(_Held, StreamingResponse):
    def __init__(self, content: AsyncIterator[bytes], *, release: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._release = release


class HeldEventSourceResponse(_Held, EventSourceResponse):
    def __init__(self, content: AsyncIterator[Any], *, release: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._release = release


def lines_event(batches: list[Batch]) -> dict[str, Any]:
    return {"event": "lines", "id": str(batches[-1].last), "data": logwire.dumps(batches)}


async def stored_events(svc: Services, job_id: str, after: int) -> AsyncIterator[dict[str, Any]]:
    """The stored log after line ``after``, as the log store reads and encodes it page by page off
    the event loop (``LogStore.stored_wire``)."""
    async for data, last in svc.logs.stored_wire(job_id, after):
        yield {"event": "lines", "id": str(last), "data": data}


def merged_event(items: list[Shared], sent: int) -> tuple[dict[str, Any] | bytes | None, int]:
    """One SSE event for every batch that arrived since the last one, re-using the data encoded
    once for all watchers; only a batch that overlaps what this reader already has is cut."""
    if len(items) == 1 and items[0].batches[0].n > sent:  # the usual case: the shared event as is
        return items[0].frame, items[0].batches[-1].last
    parts: list[str] = []
    last = sent
    for shared in items:
        if shared.batches[-1].last <= last:
            continue
        if shared.batches[0].n > last:
            parts.append(shared.data[1:-1])
        else:
            fresh = [b for b in (x.after(last) for x in shared.batches) if b is not None]
            parts.append(logwire.dumps(fresh)[1:-1])
        last = shared.batches[-1].last
    if not parts:
        return None, sent
    return {"event": "lines", "id": str(last), "data": "[" + ",".join(parts) + "]"}, last


async def log_events(
    svc: Services, hub: LogHub, job: JobOut, sent: int, snapshot: Callable[[], JobOut], follow: bool = True
) -> AsyncIterator[dict[str, Any] | bytes]:
    """Every event for one reader from line ``sent`` on (the reader's stream slot is given back by
    the answer, ``HeldEventSourceResponse``). Redis out of reach ends the stream without ``end``,
    which the client resumes from its last line, with one line in the server's log (it was an
    unhandled error and two tracebacks a reader: bench/redis-outage.txt)."""
    w = None
    try:
        if job.state.finished:
            end = {"event": "end", "data": sse_json(job)}  # the job as it ended: known before its log is read
            async for event in stored_events(svc, job.id, sent):
                yield event
            yield end
            return
        w = await hub.watch(job.id)
        if job.state is JobState.queued:
            yield {"event": "status", "data": sse_json(job, include=STATUS_FIELDS)}
        async for event in _backlog(svc, job.id, sent, hub.position(job.id), snapshot):
            yield event
            if event["event"] == "end":
                return
            sent = int(event["id"])
        if not follow:
            yield {"event": "caught_up", "data": sse_json(job, include=STATUS_FIELDS)}
            return
        async for item in _live(svc, w, job.id, sent, snapshot):
            yield item
    except REDIS_AWAY as exc:
        log.warning("log stream of job %s cut: Redis unavailable: %s", job.id, str(exc).split("\n", 1)[0])
    finally:
        if w is not None:
            hub.unwatch(w)


async def _backlog(svc: Services, job_id: str, sent: int, top: int, snapshot: Callable[[], JobOut]) -> AsyncIterator[dict[str, Any]]:
    """What was written before this watcher joined, page by page, up to what the fan-out has."""
    while True:
        page = await svc.logs.apage(job_id, sent)
        lines = [b for b in page if b.s != END]
        if lines:
            yield lines_event(lines)
            sent = lines[-1].last
        if len(lines) != len(page):
            yield {"event": "end", "data": sse_json(await run_in_threadpool(snapshot))}
            return
        if len(page) < PAGE_ENTRIES or sent >= top:
            return


async def _live(svc: Services, w: Watcher, job_id: str, sent: int, snapshot: Callable[[], JobOut]) -> AsyncIterator[dict[str, Any] | bytes]:
    """The fan-out's batches as they come, until the job's end (or the reader is cut off)."""
    while True:
        items = await w.next()
        merged, sent = merged_event([payload for kind, payload in items if kind == "lines"], sent)
        if merged:
            yield merged
        for kind, payload in items:
            if kind == "status":
                yield {"event": "status", "data": sse_json(payload, include=STATUS_FIELDS)}
            elif kind == "end":
                yield {"event": "end", "data": sse_json(await run_in_threadpool(snapshot))}
                return
            elif kind == "finished":  # no end marker came (Redis lost it): finish from storage
                async for event in stored_events(svc, job_id, sent):
                    yield event
                yield {"event": "end", "data": sse_json(payload)}
                return
            elif kind == "cut":  # too slow a reader: it reconnects with Last-Event-ID
                return
