"""What each server process keeps of the term (each board, each kind's judged runs: issue 52) is
made or brought up to date by one thread at a time. At 250,000 jobs making a board from every run
takes seconds; when a deadline moved and fifty students looked at once, each look made it again in
a thread of its own, and every one of them waited for all of them. Now the first look makes it and
the others wait for that one, then take what it kept and fold in only what ended since."""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from typing import Any

log = logging.getLogger("raiserver")
WAIT_SECONDS = 120.0  # past this, a look makes its own (a maker stuck on the database must not stall every page)

_TURNS: weakref.WeakKeyDictionary[Any, dict[Hashable, threading.Lock]] = weakref.WeakKeyDictionary()  # per engine
_TURNS_LOCK = threading.Lock()


@contextmanager
def one_maker(bind: Any, what: Hashable) -> Iterator[None]:
    """Hold ``what``'s turn on this database (``bind``, a session's engine) while making it."""
    with _TURNS_LOCK:
        lock = _TURNS.setdefault(bind, {}).setdefault(what, threading.Lock())
    held = lock.acquire(timeout=WAIT_SECONDS)
    if not held:
        log.warning("%s: still being made after %.0f s; this look makes its own", what, WAIT_SECONDS)
    try:
        yield
    finally:
        if held:
            lock.release()
