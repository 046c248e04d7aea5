"""How much does rai add to a container run? In one run, time 20× each:
(a) `docker run --rm --network none IMG true` directly, and
(b) the same trivial job (`true`) through `raiclient submit`, end to end, against `raid dev`.
Prints the medians and the ratio b/a.

    .venv/bin/python bench/submit_overhead.py [-n 20]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from service import project, raid_dev  # noqa: E402

IMAGE = "rai/busybox:latest"


def timed(args: list[str], env: dict | None = None) -> float:
    t0 = time.perf_counter()
    res = subprocess.run(args, env=env, capture_output=True, text=True)
    took = time.perf_counter() - t0
    if res.returncode != 0:
        raise SystemExit(f"{args[:4]} failed ({res.returncode}):\n{res.stdout[-1500:]}{res.stderr[-1500:]}")
    return took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=20)
    n = ap.parse_args().n
    with raid_dev("docker") as dev:
        proj = project(dev.tmp / "trivial", IMAGE, ["true"])
        submit = dev.client("submit", "-p", str(proj))
        direct = ["docker", "run", "--rm", "--network", "none", IMAGE, "true"]
        timed(direct), timed(submit, dev.env)  # warm both paths once
        a, b = [], []
        for _ in range(n):  # interleaved, so drift hits both alike
            a.append(timed(direct))
            b.append(timed(submit, dev.env))
        ma, mb = statistics.median(a), statistics.median(b)
        print(f"docker run --rm --network none {IMAGE} true: median {ma * 1000:.0f} ms over {n}")
        print(f"raiclient submit (trivial job, end to end):   median {mb * 1000:.0f} ms over {n}")
        print(f"ratio b/a: {mb / ma:.2f}")


if __name__ == "__main__":
    main()
