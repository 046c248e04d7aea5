"""The process's connections to Redis, made once at start and handed to every user of them (the
log store, the run marks, the loops, the metrics, the login limiter, the upload gate, image pulls):
one set for the process and one for the queue's lane (``store/lane.py``), so the connections a
server process holds never grow with its users."""

from __future__ import annotations

import redis
import redis.asyncio as aioredis

# Redis out of reach (refused, timed out, still loading its file after a restart, no connection
# free in the pool): passing, answered 503, not a bug's 500 (api/errors.py, live streams)
REDIS_AWAY: tuple[type[Exception], ...] = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)


class RedisService:
    """A synchronous client (handlers run in threads) and an asynchronous one (the live feeds), each
    over a small pool that waits for a free connection rather than fail under a crowd of watchers."""

    def __init__(self, url: str, pool_size: int = 16, wait_seconds: float = 20) -> None:
        self.url = url
        self.sync: redis.Redis = redis.Redis(
            connection_pool=redis.BlockingConnectionPool.from_url(url, max_connections=pool_size, timeout=wait_seconds)
        )
        self.aio: aioredis.Redis = aioredis.Redis(
            connection_pool=aioredis.BlockingConnectionPool.from_url(url, max_connections=pool_size, timeout=wait_seconds)
        )

    async def aclose(self) -> None:
        await self.aio.aclose()
        await self.aio.connection_pool.disconnect()  # a pool made apart is not closed with its client
        self.close()

    def close(self) -> None:
        """The synchronous pool's connections (the asynchronous one's: ``aclose``)."""
        self.sync.close()
        self.sync.connection_pool.disconnect()
