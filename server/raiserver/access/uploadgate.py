"""Uploads a student may make, counted in Redis so that every server process sees the same
numbers: attempts per minute, refused ones included (a refused upload still cost the server its
reading and checking: 45 parallel bad build files once took it down), and uploads in flight at once
(each holds a temporary file and, while checked, a thread).

An upload in flight is a member of the student's sorted set whose score is when it lapses; the
upload renews it while bytes arrive, so one left by a killed server process lapses within a minute.
If Redis is out of reach the gate stays open rather than refusing everyone.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import AsyncIterator

import redis
from fastapi.concurrency import run_in_threadpool

from raiserver.errors import OverQuota
from raiserver.store.redis_keys import upload_attempts, uploads_in_flight

LAPSE_SECONDS = 60.0
RENEW_EVERY = 5.0


class UploadGate:
    def __init__(self, r: redis.Redis, attempts_per_minute: int, in_flight: int):
        self.redis, self.attempts_per_minute, self.in_flight = r, attempts_per_minute, in_flight

    def admit(self, user_id: int) -> str | None:
        """Count this attempt and take an in-flight place; raise OverQuota (429) if either limit
        is reached. Returns the place's token (None when Redis is away)."""
        minute = int(time.time() // 60)
        attempts_key, flight_key = upload_attempts(user_id, minute), uploads_in_flight(user_id)
        token, now = secrets.token_hex(8), time.time()
        try:
            pipe = self.redis.pipeline()
            pipe.incr(attempts_key)
            pipe.expire(attempts_key, 120)
            pipe.zremrangebyscore(flight_key, "-inf", now)
            pipe.zcard(flight_key)
            attempts, _, _, flying = pipe.execute()
            if attempts > self.attempts_per_minute:
                wait = 60 - int(now % 60)
                raise OverQuota(
                    f"You tried {attempts} uploads in this minute (the limit is {self.attempts_per_minute}, "
                    f"refused ones included); try again in {wait} s",
                    wait,
                )
            if flying >= self.in_flight:
                raise OverQuota(
                    f"You already have {flying} uploads in progress (the limit is {self.in_flight}); wait for them to finish", 10
                )
            self.redis.zadd(flight_key, {token: now + LAPSE_SECONDS})
            self.redis.expire(flight_key, int(LAPSE_SECONDS) * 2)
        except redis.RedisError:
            return None
        return token

    def release(self, user_id: int, token: str | None) -> None:
        if token is None:
            return
        with contextlib.suppress(redis.RedisError):
            self.redis.zrem(uploads_in_flight(user_id), token)

    async def renewing(self, body: AsyncIterator[bytes], user_id: int, token: str | None) -> AsyncIterator[bytes]:
        """The body, renewing the upload's place while its bytes arrive."""
        renewed = time.monotonic()
        async for chunk in body:
            if token is not None and time.monotonic() - renewed > RENEW_EVERY:
                renewed = time.monotonic()
                await run_in_threadpool(self._renew, user_id, token)
            yield chunk

    def _renew(self, user_id: int, token: str) -> None:
        with contextlib.suppress(redis.RedisError):
            self.redis.zadd(uploads_in_flight(user_id), {token: time.time() + LAPSE_SECONDS}, xx=True)
