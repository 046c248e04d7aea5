"""Every Redis name only the server uses, in one place (the names the worker shares are
``raiprotocol.keys``): what each holds and who writes it, so nobody invents a second spelling."""

from __future__ import annotations

import hashlib

REAPER_LAST = "rai:reaper:last"  # when the reaper last ran (any server process)
REAPER_AWAKE = "rai:reaper:awake"  # since when it has run without a long gap
COUNTS = "rai:metrics:counts"  # hash "name|label" -> count, summed over processes (live/counts.py)
STREAMS = "rai:metrics:streams"  # hash pid -> "open streams|unix time"


def process_lock(name: str) -> str:
    """A lock one server process at a time holds for a background pass (the reaper, similarity)."""
    return f"rai:{name}-lock"


def upload_attempts(user_id: int, minute: int) -> str:
    """A student's upload attempts in one minute (a counter that expires)."""
    return f"rai:uploads:attempts:{user_id}:{minute}"


def uploads_in_flight(user_id: int) -> str:
    """A student's uploads under way: a sorted set of tokens by when each lapses."""
    return f"rai:uploads:flight:{user_id}"


def login_failures_of_pair(ip: str, key: str) -> str:
    """Wrong logins from an address with one access key (hashed: no key is stored); ``+':wait'``
    is the pair's wait once over its limit."""
    return f"rai:loginfail:pair:{ip}:{hashlib.sha256(key[:128].encode()).hexdigest()[:24]}"


def login_failures_of_address(ip: str) -> str:
    """Wrong logins from an address, whatever the key."""
    return f"rai:loginfail:ip:{ip}"
