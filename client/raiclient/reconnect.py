"""How the client rides over the server's passing trouble (a restart, a cut link, its database
away): one window, ``RAI_RECONNECT_SECONDS`` (300) without progress, and one back-off (0.25 s
doubling to 30 s, jittered, or the server's Retry-After where it names one), for following a log
(``follow.stream``) and for submitting (``riding``: a request sent again from the start once the
server answers again). What is worth another try is ``ApiError.transient`` (errors.py): never the
student's own refusals (4xx). Standard library only: submit's path."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from typing import TypeVar

from .errors import ApiError
from .output import LostConnection
from .transport import Http

T = TypeVar("T")
FIRST_PAUSE, LONGEST_PAUSE = 0.25, 30.0
PROBE = "/api/v1/me"  # answers only when the server and its database both do, and cheaply


def window() -> float:
    """Seconds without progress after which the client gives up: ``RAI_RECONNECT_SECONDS`` (300)."""
    return float(os.environ.get("RAI_RECONNECT_SECONDS", "300"))


def asked_wait(exc: ApiError) -> float | None:
    """The pause the server asked for (Retry-After in seconds on a 429 or 503), if it named one."""
    if exc.status in (429, 503) and exc.retry_after and exc.retry_after.isdigit():
        return float(exc.retry_after)
    return None


class Backoff:
    """The pauses between tries while the server is away: growing with jitter (a class's clients
    do not all come back at one instant), the server's own where it asks for one, and none past the
    window, which starts at the first failure after the last progress."""

    def __init__(self, give_up_after: float | None = None):
        self.window = window() if give_up_after is None else give_up_after
        self.since: float | None = None
        self.delay = FIRST_PAUSE

    def progress(self) -> None:
        """Something got through: the next failure starts a fresh window and short pauses."""
        self.since, self.delay = None, FIRST_PAUSE

    def pause(self, asked: float | None = None) -> float | None:
        """The pause before the next try, or None once the window is spent."""
        now = time.monotonic()
        if self.since is None:
            self.since = now
        left = self.since + self.window - now
        if left <= 0:
            return None
        pause = asked if asked is not None else self.delay * (0.5 + random.random())
        self.delay = min(self.delay * 2, LONGEST_PAUSE)
        return min(pause, left)


def riding(conn: Http, call: Callable[[], T], during: str, again: str) -> T:
    """``call``'s result, sent again from the start once the server is back, within the window.

    Only once this run has reached the server (``conn.reached``): a server never reached, a wrong
    address say, fails at once as before. A refusal that is the student's (4xx) is raised at once.
    Said on stderr as the log's follower says it: one line at the loss and one at the recovery (one
    updating line on a terminal). ``during``: what was cut ("the upload"); ``again``: what the
    recovery does ("sending it again from the start")."""
    backoff = Backoff()
    lost: LostConnection | None = None
    try:
        while True:
            try:
                return call()
            except ApiError as exc:
                # 507: the server answers that its storage fails and when to try again (issue 28):
                # the student hears it at once, not after minutes of sending the project again
                if not (exc.transient and conn.reached) or exc.status == 507:
                    raise
                if lost is None:
                    why = (
                        f"the server went away during {during}"
                        if exc.status is None
                        else f"the server is unavailable during {during} ({exc})"
                    )
                    lost = LostConnection(lost=why, doing="retrying")
                _until_back(conn, backoff, lost, exc, during, again)
    finally:
        if lost is not None:
            lost.end()


def _until_back(conn: Http, backoff: Backoff, lost: LostConnection, exc: ApiError, during: str, again: str) -> None:
    """Pause and ask (PROBE) until the server answers again, so that a big project is never sent
    into a server still away; raises the last reason once the window is spent."""
    while True:
        conn.close()  # each try on a fresh connection
        pause = backoff.pause(asked_wait(exc))
        if pause is None:
            raise ApiError(
                f"{exc}\ngave up on {during} after {backoff.window:.0f} s of retries (RAI_RECONNECT_SECONDS); "
                "'raiclient history' shows whether a job was queued",
                exc.code,
                exc.status,
            ) from None
        lost.retrying(again, pause)
        time.sleep(pause)
        try:
            conn.json("GET", PROBE)
        except ApiError as failed:
            if not failed.transient:
                raise
            exc = failed
            continue
        lost.back(again)
        return
