"""Which inputs a ranked run's timed run classifies (issue 32): the test set shuffled by a secret
seed the server chooses for each timed run, so that no answers can be precomputed or kept from an
earlier run. The course's program shuffles the same way (examples/ece408-conv/src/driver.cc:
splitmix64 driving a Fisher-Yates shuffle); the server checks each run's answers against the labels
in that order. Both sides must agree to the bit: the unit test holds a vector the C++ gave."""

from __future__ import annotations

import hashlib
import hmac

_MASK = (1 << 64) - 1


def shuffled(n: int, seed: int) -> list[int]:
    """The order of ``n`` inputs for ``seed``: linear in ``n``."""
    order = list(range(n))
    state = seed & _MASK
    for i in range(n - 1, 0, -1):
        state = (state + 0x9E3779B97F4A7C15) & _MASK
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
        z ^= z >> 31
        j = z % (i + 1)
        order[i], order[j] = order[j], order[i]
    return order


def run_seed(secret: str, job_id: str, attempt: int, run: int) -> int:
    """Timed run ``run``'s seed: from a secret only the server holds, so a student can neither
    guess it before the run nor choose it; the server finds it again to check the answers."""
    digest = hmac.new(secret.encode(), f"inputs:{job_id}:{attempt}:{run}".encode(), hashlib.sha256).digest()
    return int.from_bytes(digest[:8], "big") >> 1  # 63 bits: a plain integer in every language
