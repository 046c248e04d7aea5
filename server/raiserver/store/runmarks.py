"""What a run of a job holds in Redis besides its log, one class per set of keys (in the manner of
rq's registries): each names its key template (``raiprotocol.keys``, shared with the worker) and
is the only code on the server that writes or reads those keys.

- ``Fences``: which attempt of a job may write; raised, never lowered (``logwire.FENCE_LUA``).
- ``Leases``: present while a run renews its lease through Redis (the worker writes them).
- ``CancelFlags``: set when a running job is cancelled; the worker watches them.
"""

from __future__ import annotations

from collections.abc import Callable

import redis

from raiprotocol.keys import cancel_key, fence_key, lease_key
from raiprotocol.logwire import FENCE_LUA


class Fences:
    key_template: Callable[[str], str] = staticmethod(fence_key)

    def __init__(self, r: redis.Redis) -> None:
        self.redis = r
        self._raise = r.register_script(FENCE_LUA)

    def raise_to(self, job_id: str, attempt: int | str, ttl: int) -> None:
        """Raise the job's fence to ``attempt`` (or "end"): a run of an older attempt is refused
        from its next line on. ``ttl``: past any run of the job (an ended one's, past late writers)."""
        self._raise(keys=[self.key_template(job_id)], args=[str(attempt), max(int(ttl), 1)])

    def restore(self, fences: dict[str, int], ttl: int) -> None:
        """Put back fences Redis lost (a flush, a wiped Redis), from the database: raised, never
        lowered, so a change made meanwhile stands."""
        if not fences:
            return
        pipe = self.redis.pipeline(transaction=False)
        for job_id, attempt in fences.items():
            self._raise(keys=[self.key_template(job_id)], args=[str(attempt), max(int(ttl), 1)], client=pipe)
        pipe.execute()


class Leases:
    key_template: Callable[[str], str] = staticmethod(lease_key)

    def __init__(self, r: redis.Redis) -> None:
        self.redis = r

    def held(self, job_ids: list[str]) -> set[str]:
        """The jobs whose run renewed its lease through Redis lately (its key has not expired)."""
        if not job_ids:
            return set()
        pipe = self.redis.pipeline(transaction=False)
        for job_id in job_ids:
            pipe.exists(self.key_template(job_id))
        return {j for j, held in zip(job_ids, pipe.execute(), strict=True) if held}


class CancelFlags:
    key_template: Callable[[str], str] = staticmethod(cancel_key)
    TTL_SECONDS = 24 * 3600  # past any run's wall limit: the worker has seen it or the run is gone

    def __init__(self, r: redis.Redis) -> None:
        self.redis = r

    def request(self, job_id: str) -> None:
        self.redis.set(self.key_template(job_id), b"1", ex=self.TTL_SECONDS)

    def clear(self, job_id: str) -> None:
        """The job ended: nothing is left to stop."""
        self.redis.delete(self.key_template(job_id))
