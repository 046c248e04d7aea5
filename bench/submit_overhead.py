"""How much does rai add to a container run? In one run, time 20× each:
(a) `docker run --rm --network none IMG true` directly, and
(b) the same trivial job (`true`) through `raiclient submit`, end to end, against `raid dev`.
Prints the medians and the ratio b/a.

    .venv/bin/python bench/submit_overhead.py [-n 20]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

IMAGE = "rai/busybox:latest"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
    tmp = Path(tempfile.mkdtemp(prefix="rai-bench-"))
    port = free_port()
    env = {**os.environ, "HOME": str(tmp)}
    raid = subprocess.Popen([sys.executable, "-m", "raiserver.dev", "dev", "--data-dir", str(tmp / "data"), "--port", str(port),
                             "--executor", "docker", "--gpus", "none"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        profile = tmp / "data" / "admin.rai_profile"
        deadline = time.monotonic() + 60
        while not profile.exists() or not _worker_up(port, profile):
            if time.monotonic() > deadline or raid.poll() is not None:
                raise SystemExit("raid dev did not come up")
            time.sleep(0.3)
        proj = tmp / "trivial"
        proj.mkdir()
        (proj / "rai_build.yml").write_text(f"rai:\n  version: 0.2\n  image: {IMAGE}\ncommands:\n  build:\n    - \"true\"\n")
        client_env = {**env, "RAI_PROFILE": str(profile)}
        submit = [sys.executable, "-m", "raiclient.cli", "submit", "-p", str(proj)]
        direct = ["docker", "run", "--rm", "--network", "none", IMAGE, "true"]
        timed(direct), timed(submit, client_env)  # warm both paths once
        a, b = [], []
        for _ in range(n):  # interleaved, so drift hits both alike
            a.append(timed(direct))
            b.append(timed(submit, client_env))
        ma, mb = statistics.median(a), statistics.median(b)
        print(f"docker run --rm --network none {IMAGE} true: median {ma * 1000:.0f} ms over {n}")
        print(f"raiclient submit (trivial job, end to end):   median {mb * 1000:.0f} ms over {n}")
        print(f"ratio b/a: {mb / ma:.2f}")
    finally:
        os.killpg(raid.pid, signal.SIGTERM)
        raid.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)


def _worker_up(port: int, profile: Path) -> bool:
    from raiclient.profile import read_profile_file

    p = read_profile_file(profile)
    try:
        r = httpx.get(f"http://127.0.0.1:{port}/api/v1/workers", auth=(p.access_key, p.secret_key), timeout=2)
        return r.status_code == 200 and any(w["alive"] for w in r.json())
    except httpx.HTTPError:
        return False


if __name__ == "__main__":
    main()
