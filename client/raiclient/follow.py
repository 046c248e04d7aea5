"""Following a job's log: one reconnecting reader of the server's event stream, and the one
printer that ``submit`` and ``logs --follow`` share. Standard library only (submit's path)."""

from __future__ import annotations

import argparse
import http.client
import json
import time
from collections.abc import Iterator
from typing import Any

from raiprotocol import logwire
from raiprotocol.states import ExitCode, JobState

from .errors import ApiError
from .output import LogPrinter, LostConnection, WaitNotes, detached_lines, error, finish, say
from .reconnect import Backoff, asked_wait
from .transport import Http, connect


def stream(conn: Http, job_id: str, after: int = 0, live: bool = True, give_up_after: float | None = None) -> Iterator[tuple[str, Any]]:
    """Yield ("lines", [Batch]), ("status", dict), ("reconnecting", (last line, pause)),
    ("reconnected", last line) and finally ("end", job as a dict); with ``live=False``,
    ("caught_up", dict) instead once the lines written so far are out.

    Reconnects with exponential back-off and ``Last-Event-ID`` when the connection drops (bad
    Wi-Fi, a server restart, a stream cut off for reading too slowly), so no line is lost or
    printed twice; honours ``Retry-After`` when the server is at its stream limit. Gives up
    (ApiError) after ``give_up_after`` seconds without progress (``RAI_RECONNECT_SECONDS``, 300).
    """
    backoff = Backoff(give_up_after)
    last = after
    lost = False
    tries = 0
    while True:
        wait: float | None = None
        try:
            headers = {"Last-Event-ID": str(last)} if last else None
            for name, data, _ in conn.events(f"/api/v1/jobs/{job_id}/log", params=None if live else {"follow": "false"}, headers=headers):
                if name == "open":
                    if lost:
                        lost, tries = False, 0
                        yield "reconnected", last
                elif name == "lines":
                    fresh = [b for b in (x.after(last) for x in logwire.loads(data)) if b is not None]
                    if fresh:
                        last = fresh[-1].last
                        backoff.progress()
                        yield "lines", fresh
                elif name == "status":
                    backoff.progress()
                    yield "status", json.loads(data)
                elif name in ("end", "caught_up"):
                    yield name, json.loads(data)
                    return
        except ApiError as exc:
            wait = asked_wait(exc)
            if wait is None and not exc.transient and (exc.status is None or exc.status < 500):
                raise  # refused for good (no such job, not yours, an untrusted certificate)
        except (http.client.HTTPException, OSError, ValueError):
            conn.close()  # broke mid-stream: the next try opens a fresh connection
        pause = backoff.pause(wait)
        if pause is None:
            raise ApiError(
                f"lost the connection to {conn.server} for {backoff.window:.0f} s (gave up reconnecting after "
                f"{tries} tries); the job goes on. Resume with: raiclient logs {job_id} --follow --after {last}"
            )
        lost = True
        tries += 1
        yield "reconnecting", (last, pause)
        time.sleep(pause)


def watch(conn: Http, job_id: str, after: int = 0, position: int | None = None, eta: float | None = None) -> int:
    """Print the job's log as it comes and how it ended; returns the exit status (the job's, or
    the client's trouble). Ctrl-C detaches without cancelling. ``position``/``eta``: what the
    submit line already said (not said again)."""
    printer = LogPrinter()
    notes = WaitNotes(position, eta)
    lost = LostConnection()
    try:
        for kind, payload in stream(conn, job_id, after=after):
            if kind == "lines":
                printer.batches(payload)
            elif kind == "status":
                note = notes.line(payload)
                if note:
                    say(note)
            elif kind == "reconnecting":
                printer.flush()
                after_line, pause = payload
                lost.retrying(f"resuming after line {after_line}", pause)
            elif kind == "reconnected":
                lost.back(f"resuming after line {payload}")
            elif kind == "end":
                return finish(payload, conn.server)
    except KeyboardInterrupt:
        lost.end()
        printer.flush()
        for line in detached_lines(job_id, printer.last or after):
            say(line)
        return ExitCode.DETACHED
    except ApiError as exc:
        lost.end()
        printer.flush()
        for line in str(exc).split("\n"):
            error(line)
        return exc.code
    error(f"the log stream ended before the job did; 'raiclient status {job_id}' tells where it is")
    return ExitCode.INFRA_ERROR


def print_so_far(conn: Http, job_id: str, after: int = 0) -> None:
    """The lines a job has written until now, without waiting for more."""
    printer = LogPrinter()
    for kind, payload in stream(conn, job_id, after=after, live=False):
        if kind == "lines":
            printer.batches(payload)
        elif kind in ("end", "caught_up"):
            break
    printer.flush()


def show_log(job_id: str | None, follow: bool = False, after: int = 0, server: str | None = None) -> int:
    """``raiclient logs``: the job's log (your last job's without an id); a finished job's or, with
    ``follow``, a running one's to its end, with its exit status; else what it wrote so far."""
    conn = connect(server)
    if conn is None:
        return ExitCode.CLIENT_ERROR
    try:
        if job_id is None:
            from .session import last_job_id

            job_id = last_job_id(conn)
        job = conn.json("GET", f"/api/v1/jobs/{job_id}")
        job_id, state = str(job["id"]), JobState(job["state"])
        if follow or state.finished:
            return watch(conn, job_id, after=after)
        print_so_far(conn, job_id, after=after)  # not following a running job: what exists so far
        say(f"The job is {state.value}; follow it: raiclient logs {job_id} --follow")
        return ExitCode.OK
    except ApiError as exc:
        error(str(exc))
        return exc.code
    finally:
        conn.close()


def main(args: argparse.Namespace) -> int:
    """``raiclient logs`` as ``commands.py`` parsed it."""
    return show_log(args.job_id, args.follow, args.after, args.server)
