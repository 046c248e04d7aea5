"""What each server process counts (HTTP answers by class, refused uploads by cause, log lines
sent to watchers, open streams), flushed to Redis every couple of seconds so that a scrape of any
process sums them all (``ops/metrics.py`` reads them)."""

from __future__ import annotations

import os
import time
from collections import Counter

import redis

from raiserver.store.redis_keys import COUNTS, STREAMS


class ProcessCounts:
    """This process's counters, flushed to Redis; cheap to bump on a hot path."""

    def __init__(self) -> None:
        self.pending: Counter[str] = Counter()

    def add(self, name: str, label: str, n: int = 1) -> None:
        self.pending[f"{name}|{label}"] += n

    def flush(self, r: redis.Redis, open_streams: int) -> None:
        pending, self.pending = self.pending, Counter()
        try:
            pipe = r.pipeline(transaction=False)
            for key, n in pending.items():
                pipe.hincrby(COUNTS, key, n)
            pipe.hset(STREAMS, str(os.getpid()), f"{open_streams}|{time.time():.0f}")
            pipe.execute()
        except redis.RedisError:
            self.pending.update(pending)  # next time
