"""The events of one reader's log stream (Server-Sent Events): the stored log from disk for a
finished job, else what Redis holds so far, then the live batches the hub hands this watcher, with
status while queued and ``end`` with the job. The route only authorises and opens it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse
from pydantic import BaseModel
from starlette.types import Receive, Scope, Send

from raiprotocol import logwire
from raiprotocol.logwire import END, Batch
from raiprotocol.markers import SYSTEM_MARK, disarm
from raiprotocol.models import JobOut, JobState
from raiserver.live.feed import LogHub, Shared, Watcher
from raiserver.live.logs import PAGE_ENTRIES
from raiserver.parts import Services

STATUS_FIELDS = {"state", "position", "eta_seconds", "eta_low", "eta_high", "eta_guess", "position_why", "worker"}


def sse_json(model: BaseModel, **kw: Any) -> str:
    """JSON with every non-ASCII character escaped: an SSE data field is split at any Unicode line
    break (U+2028, NEL…), which job output may well contain."""
    return json.dumps(model.model_dump(mode="json", **kw))


async def plain_text(svc: Services, hub: LogHub, job_id: str, user_id: int) -> AsyncIterator[bytes]:
    """A finished job's stored log as text, a page at a time from disk, read and rendered off the
    event loop; it holds one of the reader's stream slots (``LogHub.admit``, taken by the route)
    until it ends, however it ends: a download is a stream like any other, and one student's
    hundreds of them held the server's threads once the answer had started, past admission."""

    def page(offset: int) -> tuple[bytes, int]:
        batches, offset = svc.logs.stored_page(job_id, offset, 0)
        text = "".join(
            ("".join(f"{SYSTEM_MARK} {t}\n" for t in b.lines()) if b.s == "sys" else "".join(f"{disarm(t)}\n" for t in b.lines()))
            for b in batches
        )
        return text.encode(), offset

    try:
        offset = 0
        while offset >= 0:
            text, offset = await run_in_threadpool(page, offset)
            yield text
    finally:
        hub.release(user_id)


class HeldFileResponse(FileResponse):
    """A file sent as one of the caller's streams: ``release`` gives its slot back once the sending
    ends, whichever way it ends (sent, the client gone, an error)."""

    def __init__(self, path: Path, *, release: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(path, **kwargs)
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()


def lines_event(batches: list[Batch]) -> dict[str, Any]:
    return {"event": "lines", "id": str(batches[-1].last), "data": logwire.dumps(batches)}


async def stored_events(svc: Services, job_id: str, after: int) -> AsyncIterator[dict[str, Any]]:
    """The stored log after line ``after``, a page at a time from disk: bounded memory however
    long the log, nothing more read once the client is gone, and the reading and encoding done
    off the event loop (the server keeps answering everyone else meanwhile)."""

    def page(offset: int) -> tuple[dict[str, Any] | None, int]:
        batches, offset = svc.logs.stored_page(job_id, offset, after, max_bytes=256 * 1024)
        return (lines_event(batches) if batches else None), offset

    offset = 0
    while offset >= 0:
        event, offset = await run_in_threadpool(page, offset)
        if event:
            yield event


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
    svc: Services, hub: LogHub, job: JobOut, sent: int, snapshot: Callable[[], JobOut], user_id: int, follow: bool = True
) -> AsyncIterator[dict[str, Any] | bytes]:
    """Every event for one reader from line ``sent`` on; releases the reader's stream slot at the
    end, however the stream ends (finished, cut off as too slow, or the client gone)."""
    w = None
    try:
        if job.state.finished:
            async for event in stored_events(svc, job.id, sent):
                yield event
            yield {"event": "end", "data": sse_json(job)}
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
    finally:
        if w is not None:
            hub.unwatch(w)
        hub.release(user_id)


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
