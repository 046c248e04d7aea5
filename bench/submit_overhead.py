"""How much does rai add to a container run? In one run, time 20× each:
(a) `docker run --rm --network none IMG true` directly, and
(b) the same trivial job (`true`) through `raiclient submit`, end to end, against `raid dev`,
    raiclient installed as students install it (``Dev.student_client``).
Prints the medians, the ratio b/a, and where (b)'s time goes: the client's own start
(`raiclient version`), and the median gap between consecutive phases of the job's timeline.

    .venv/bin/python bench/submit_overhead.py [-n 20]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from datetime import datetime
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


def phases_of(dev, job_id: str) -> list[tuple[str, float]]:
    with dev.http() as h:
        job = h.get(f"/api/v1/jobs/{job_id}").json()
    return [(p["name"], datetime.fromisoformat(p["at"]).timestamp()) for p in job["phases"]]


def latest_job(dev) -> str:
    with dev.http() as h:
        return h.get("/api/v1/jobs", params={"limit": 1}).json()["jobs"][0]["id"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=20)
    n = ap.parse_args().n
    import docker

    from raiworker.images import ensure_busybox_image

    if not ensure_busybox_image(docker.from_env()):
        raise SystemExit("install busybox-static: the bench builds rai/busybox from it")
    with raid_dev("docker") as dev:
        dev.student_client()
        proj = project(dev.tmp / "trivial", IMAGE, ["true"])
        submit = dev.client("submit", "-p", str(proj))
        direct = ["docker", "run", "--rm", "--network", "none", IMAGE, "true"]
        timed(direct), timed(submit, dev.env)  # warm both paths once
        a, b, start = [], [], []
        gaps: dict[str, list[float]] = defaultdict(list)
        for _ in range(n):  # interleaved, so drift hits both alike
            a.append(timed(direct))
            t0 = time.time()
            b.append(timed(submit, dev.env))
            t1 = time.time()
            start.append(timed(dev.client("version"), {**dev.env, "RAI_PROFILE": "/nonexistent"}))
            steps = phases_of(dev, latest_job(dev))
            prev_name, prev_at = "client started", t0
            for name, at in [*steps, ("client exited", t1)]:
                gaps[f"{prev_name} -> {name}"].append(at - prev_at)
                prev_name, prev_at = name, at
        ma, mb = statistics.median(a), statistics.median(b)
        print(f"docker run --rm --network none {IMAGE} true: median {ma * 1000:.0f} ms over {n}")
        print(f"raiclient submit (trivial job, end to end):   median {mb * 1000:.0f} ms over {n}")
        print(f"ratio b/a: {mb / ma:.2f}")
        print(f"\nclient start alone (raiclient version, no server): median {statistics.median(start) * 1000:.0f} ms")
        print("where the submit's time goes (median of each step):")
        for step, values in gaps.items():
            print(f"  {statistics.median(values) * 1000:7.0f} ms  {step}")


if __name__ == "__main__":
    main()
