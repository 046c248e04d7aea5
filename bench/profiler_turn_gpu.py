"""The profiler's turn on a shared GPU, on the real GPU (the device host: process executor, the
host's CUDA and ncu): a job that keeps profiling (ncu again and again) holds the turn while
another job's ncu waits; past RAI_PROFILER_TURN_SECONDS it is stopped, mid-collection, and the
one that waited must then profile without a driver error. A third job profiling as long with
nobody waiting is not stopped. Prints what each job's log showed; writes the logs to $OUT.

    python3 bench/profiler_turn_gpu.py [--turn 10]   (FASHION_MNIST_DIR: the t10k files)
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from service import raid_dev  # noqa: E402

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "ece408-conv"
HEAD = "rai:\n  version: 0.2\n  image: rai/ece408:cuda13\nresources:\n  gpu:\n    count: 1\ncommands:\n  build:\n"
NCU = "ncu --section SpeedOfLight ./m2 100"


def project(root: Path, commands: list[str]) -> Path:
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns("rai_build.yml", "instructor"))
    lines = ["/bin/sh -c 'cp -r /src/* /build'", "make m2", *commands]
    (root / "rai_build.yml").write_text(HEAD + "".join(f"    - {c!r}\n" for c in lines))
    return root


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turn", type=int, default=10)
    args = ap.parse_args()
    out = Path(os.environ.get("OUT", "/tmp/rai-profiler-turn"))
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"rai-turn-{os.getpid()}"
    keeps = f"sh -c 'for i in $(seq 40); do {NCU} || exit 1; done'"  # ~3 s each: 2 minutes of profiling
    holder = project(tmp / "holder", [keeps])
    waiter = project(tmp / "waiter", ["sleep 6", NCU])
    alone = project(tmp / "alone", [f"sh -c 'for i in $(seq 6); do {NCU} || exit 1; done'"])
    many = project(tmp / "many", [NCU] * 6)  # profiling as six commands: the turn is handed on between them
    other = project(tmp / "other", ["sleep 6", NCU])
    env = {
        "RAI_JOBS_PER_GPU": "2",
        "RAI_PROFILER_TURN_SECONDS": str(args.turn),
        "RAI_JOB_ENV": f"FASHION_MNIST_DIR={os.environ['FASHION_MNIST_DIR']}",
    }
    with raid_dev("process", env, gpus="auto") as dev:

        def submit(proj: Path) -> str:
            res = subprocess.run(
                dev.client("submit", "-p", str(proj), "--detach"), env=dev.env, capture_output=True, text=True, timeout=120
            )
            found = re.search(r"\b([0-9A-Z]{26})\b", res.stdout + res.stderr)
            if res.returncode or not found:
                raise SystemExit(f"submit failed: {res.stdout}{res.stderr}")
            return found.group(1)

        def finish(ids: list[str], limit: float) -> dict[str, dict]:
            with dev.http() as h:
                deadline = time.monotonic() + limit
                while True:
                    jobs = {i: h.get(f"/api/v1/jobs/{i}").json() for i in ids}
                    if all(j["state"] not in ("queued", "running") for j in jobs.values()) or time.monotonic() > deadline:
                        for i in ids:
                            jobs[i]["log"] = h.get(f"/api/v1/jobs/{i}/log.txt").text
                        return jobs

        t0 = time.monotonic()
        pair = finish([submit(holder), submit(waiter)], 240)
        pair_s = time.monotonic() - t0
        t0 = time.monotonic()
        single = finish([submit(alone)], 240)
        alone_s = time.monotonic() - t0
        handed = finish([submit(many), submit(other)], 240)
    for name, job in zip(["holder", "waiter", "alone"], [*pair.values(), *single.values()], strict=True):
        (out / f"{name}.log.txt").write_text(job["log"])
        log = job["log"]
        print(
            f"{name}: {job['state']}; ncu runs finished {log.count('==PROF== Disconnected')}, "
            f"ncu errors {log.count('==ERROR==')}; waited its turn: {'waits its turn' in log}; "
            f"stopped at the turn limit: {'held this shared GPU' in log}"
        )
    print(f"holder + waiter drained in {pair_s:.1f} s (the holder alone would profile ~120 s); alone: {alone_s:.1f} s")
    six, one = handed.values()
    (out / "many.log.txt").write_text(six["log"])
    (out / "other.log.txt").write_text(one["log"])
    ended = max(p["at"] for p in one["phases"] if p["name"] == "command ended")
    before = sum(1 for p in six["phases"] if p["name"] == "command started" and "ncu" in (p["detail"] or "") and p["at"] < ended)
    print(
        f"six ncu commands and one more job's: {six['state']} / {one['state']}, ncu errors "
        f"{six['log'].count('==ERROR==') + one['log'].count('==ERROR==')}; the other job's ncu waited its turn: "
        f"{'waits its turn' in one['log']}, and ended before the six-command job's ncu command {before + 1} of 6 started"
    )


if __name__ == "__main__":
    main()
