"""The parts every server process makes once, at start (``create_app``), and reaches one way.

``Services`` is what the domain (jobs, submissions, retention) works with; ``AppServices`` adds
what only requests and background loops use. One object of the latter per process, kept at
``app.state.services`` and nowhere else: handlers take it as ``svc: ServicesDep``
(``api/deps.py``), background loops as ``services_of(app)``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request

from raiserver.access.hardening import LoginLimiter
from raiserver.access.uploadgate import UploadGate
from raiserver.config import Settings
from raiserver.fleet.dispatch import Dispatcher
from raiserver.live.counts import ProcessCounts
from raiserver.live.feed import LogHub
from raiserver.live.logs import LogStore
from raiserver.live.queuefeed import QueueFeed
from raiserver.store.db import Database
from raiserver.store.lane import Lane
from raiserver.store.redisconn import RedisService
from raiserver.store.runmarks import CancelFlags, Fences, Leases
from raiserver.store.storage import Storage


def _no_kick() -> None:
    """Outside a running server (tests, the CLI) nobody waits for a release pass."""


@dataclass
class Services:
    settings: Settings
    storage: Storage
    redis: RedisService  # the process's one Redis: every user of it is handed this
    logs: LogStore
    dispatcher: Dispatcher
    kick: Callable[[], None] = _no_kick  # run a fair-share release pass soon
    fences: Fences = field(init=False)  # which attempt of a job may write
    leases: Leases = field(init=False)  # runs that renewed their lease through Redis
    cancels: CancelFlags = field(init=False)  # running jobs asked to stop

    def __post_init__(self) -> None:
        self.fences, self.leases, self.cancels = Fences(self.redis.sync), Leases(self.redis.sync), CancelFlags(self.redis.sync)


@dataclass
class AppServices(Services):
    db: Database = field(kw_only=True)
    queue_lane: Lane = field(kw_only=True)  # the workers' reports and the release and reaper passes (store/lane.py)
    hub: LogHub = field(kw_only=True)
    queue_feed: QueueFeed = field(kw_only=True)
    login_limiter: LoginLimiter = field(kw_only=True)
    upload_gate: UploadGate = field(kw_only=True)
    counts: ProcessCounts = field(kw_only=True, default_factory=ProcessCounts)
    _lane: AppServices | None = field(default=None, init=False, repr=False, compare=False)

    def in_lane(self) -> AppServices:
        """These services as the queue's lane uses them (store/lane.py): the same parts, with Redis,
        and the log store, fences, leases and cancel flags over it, from the lane's own connections."""
        if self._lane is None:
            r = self.queue_lane.redis
            # kick: the process's own, as it is when called (set once the loops start, maybe after this)
            self._lane = dataclasses.replace(self, redis=r, logs=LogStore(r, self.storage, self.logs.ttl), kick=lambda: self.kick())
        return self._lane


def services_of(app: Any) -> AppServices:
    """The process's services from the FastAPI app (a background loop's way in)."""
    svc: AppServices = app.state.services
    return svc


async def services(request: Request) -> AppServices:
    """The process's services for a request: the API's dependency (``api/deps.py``'s ServicesDep),
    resolved once a request however many of its dependencies ask for it. Async: reading an attribute
    needs no thread (a sync one took one of anyio's threads for every request)."""
    return services_of(request.app)
