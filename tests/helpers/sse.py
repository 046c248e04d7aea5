"""Reading the server's live log stream (SSE) in tests: one decoder of its events."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator

import httpx


class Decoder:
    """The server's event stream, a line at a time: each data line comes out with its event's
    name and id (the server sends one data line an event)."""

    def __init__(self) -> None:
        self.event, self.id = "message", None

    def feed(self, raw: str) -> tuple[str, str, str | None] | None:
        if raw.startswith("event:"):
            self.event = raw.split(":", 1)[1].strip()
        elif raw.startswith("id:"):
            self.id = raw.split(":", 1)[1].strip()
        elif raw.startswith("data:"):
            return self.event, raw.split(":", 1)[1].lstrip(" "), self.id
        elif not raw:
            self.event, self.id = "message", None
        return None


def events(raw_lines: Iterable[str]) -> Iterator[tuple[str, str, str | None]]:
    """(event name, data, id) for each event of a server-sent event stream, in order."""
    decoder = Decoder()
    for raw in raw_lines:
        if (found := decoder.feed(raw)) is not None:
            yield found


async def aevents(raw_lines: AsyncIterable[str]) -> AsyncIterator[tuple[str, str, str | None]]:
    """``events`` for an asynchronous stream."""
    decoder = Decoder()
    async for raw in raw_lines:
        if (found := decoder.feed(raw)) is not None:
            yield found


def read_log(http: httpx.Client, job_id: str, last_event_id: int | None = None) -> list[dict]:
    """Every line of a job's log stream (SSE), up to its end event, as {n, t, s, text}."""
    from raiprotocol import logwire

    headers = {"Last-Event-ID": str(last_event_id)} if last_event_id is not None else {}
    lines: list[dict] = []
    with http.stream("GET", f"/api/v1/jobs/{job_id}/log", headers=headers, timeout=60) as resp:
        assert resp.status_code == 200
        for event, data, _ in events(resp.iter_lines()):
            if event == "lines":
                for b in logwire.loads(data):
                    lines.extend({"n": b.n + i, "t": b.t, "s": b.s, "text": text} for i, text in enumerate(b.lines()))
            elif event == "end":
                break
    return lines
