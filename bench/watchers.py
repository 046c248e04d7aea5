"""Many people watching live logs at once, as before a deadline. Starts the whole service
(`raid dev`, process executor), runs J jobs that print 10 lines a second, and has W watchers
follow them over SSE (spread evenly over the jobs) from P client processes. Prints: broken
streams, whether every watcher got every line exactly once, line latency (worker read -> watcher
received, for lines printed after the watcher connected: older ones are a replay) p50/p99/max,
the peak number of Redis connections and the server's peak RSS.

    .venv/bin/python bench/watchers.py [-w 1000] [-j 1] [-n 100] [-p 8]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from service import project, raid_dev  # noqa: E402

STAFF_STREAMS = 250  # watchers per TA account (the per-staff cap is 500)


def watch_many(url: str, auth: list[tuple[str, str]], jobs: list[str], count: int, first: int, out: mp.Queue) -> None:
    """One client process: ``count`` watchers, round-robin over the jobs and accounts."""
    import httpx

    from raiprotocol import logwire

    async def one(client: httpx.AsyncClient, jid: str) -> tuple[list[int], list[float], str | None]:
        seen: list[int] = []
        delays: list[float] = []
        event = None
        try:
            async with client.stream("GET", f"/api/v1/jobs/{jid}/log", timeout=600) as resp:
                if resp.status_code != 200:
                    return seen, delays, f"HTTP {resp.status_code}"
                connected = time.time()
                async for raw in resp.aiter_lines():
                    if raw.startswith("event:"):
                        event = raw[6:].strip()
                    elif raw.startswith("data:") and event == "lines":
                        now = time.time()
                        for b in logwire.loads(raw[5:]):
                            seen.extend(range(b.n, b.last + 1))
                            if b.s == "out" and b.t >= connected:
                                delays.extend([now - b.t] * b.c)
                    elif raw.startswith("data:") and event == "end":
                        return seen, delays, None
            return seen, delays, "closed without end"
        except httpx.HTTPError as exc:
            return seen, delays, repr(exc)

    async def main() -> list:
        clients = [
            httpx.AsyncClient(base_url=url, auth=a, limits=httpx.Limits(max_connections=None, max_keepalive_connections=0)) for a in auth
        ]
        tasks = []
        for k in range(count):
            i = first + k
            tasks.append(one(clients[(i // STAFF_STREAMS) % len(clients)], jobs[i % len(jobs)]))
        results = await asyncio.gather(*tasks)
        for c in clients:
            await c.aclose()
        return [(jobs[(first + k) % len(jobs)], *r) for k, r in enumerate(results)]

    out.put(asyncio.run(main()))


def server_pids() -> list[int]:
    """The uvicorn process and, with --workers, its worker processes."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"raiserver.ops.cli\0serve" in cmd or b"raiserver.asgi:app" in cmd:  # as launch.py starts it today, or before
                found.append(int(pid))
    children = [
        int(c) for p in found for t in os.listdir(f"/proc/{p}/task") for c in Path(f"/proc/{p}/task/{t}/children").read_text().split()
    ]
    return found + children


def rss(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                total += next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) * 1024
        except OSError:
            pass
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-w", "--watchers", type=int, default=1000)
    ap.add_argument("-j", "--jobs", type=int, default=1)
    ap.add_argument("-n", "--lines", type=int, default=100, help="lines each job prints, 10 a second")
    ap.add_argument("-p", "--procs", type=int, default=min(8, os.cpu_count() or 2), help="client processes")
    ap.add_argument("-s", "--server-workers", type=int, default=1, help="server processes (uvicorn --workers)")
    args = ap.parse_args()
    import redis

    from raiprotocol.profile import read_profile_file

    with raid_dev("process", {"RAI_SLOTS": str(max(args.jobs, 1))}, server_workers=args.server_workers) as dev:
        data = dev.tmp / "data"
        env = {**os.environ, "RAI_DATA_DIR": str(data), "RAI_SECRETS_FILE": str(data / "secrets.env")}
        auth = []
        for k in range((args.watchers + STAFF_STREAMS - 1) // STAFF_STREAMS):
            prof = dev.tmp / f"ta{k}.profile"
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "raiserver.ops.cli",
                    "add-user",
                    f"ta{k}",
                    "--role",
                    "ta",
                    "--server-url",
                    dev.url,
                    "--profile",
                    str(prof),
                ],
                env=env,
                check=True,
                capture_output=True,
            )
            p = read_profile_file(prof)
            auth.append((p.access_key, p.secret_key))
        proj = project(
            dev.tmp / "ticker",
            "rai/busybox:latest",
            ["sleep 8", f"sh -c 'for i in $(seq 1 {args.lines}); do echo line $i; sleep 0.1; done'"],
        )
        from raiclient.pack import pack_project

        body = pack_project(proj).path.read_bytes()
        with dev.http() as h:
            jobs = [
                h.post("/api/v1/jobs", content=body, headers={"Content-Type": "application/gzip"}).json()["id"] for _ in range(args.jobs)
            ]
        pid = server_pids()
        server_env = Path(f"/proc/{pid[0]}/environ").read_bytes().split(b"\0")
        r = redis.Redis.from_url(next(v.split(b"=", 1)[1].decode() for v in server_env if v.startswith(b"RAI_REDIS_URL=")))
        base_clients, base_rss = int(r.info("clients")["connected_clients"]), rss(pid)
        peak = {"clients": base_clients, "rss": base_rss}
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                peak["clients"] = max(peak["clients"], int(r.info("clients")["connected_clients"]))
                peak["rss"] = max(peak["rss"], rss(pid))
                time.sleep(0.2)

        sampler = threading.Thread(target=sample)
        sampler.start()
        q: mp.Queue = mp.Queue()
        per = [args.watchers // args.procs + (1 if i < args.watchers % args.procs else 0) for i in range(args.procs)]
        starts = [sum(per[:i]) for i in range(args.procs)]
        procs = [mp.Process(target=watch_many, args=(dev.url, auth, jobs, per[i], starts[i], q)) for i in range(args.procs) if per[i]]
        t0 = time.time()
        for p in procs:
            p.start()
        results = [row for _ in procs for row in q.get(timeout=900)]
        for p in procs:
            p.join()
        stop.set()
        sampler.join()
        took = time.time() - t0
        with dev.http() as h:
            expected = {}
            for jid in jobs:
                lines = []
                for raw in h.get(f"/api/v1/jobs/{jid}/log", timeout=60).text.splitlines():
                    if raw.startswith("data: [{"):
                        for b in json.loads(raw[5:]):
                            lines.extend(range(b["n"], b["n"] + b["c"]))
                expected[jid] = lines
        broken = [err for _, _, _, err in results if err]
        exact = sum(1 for jid, seen, _, err in results if not err and seen == expected[jid])
        delays = sorted(d for _, _, ds, _ in results for d in ds)
        q99 = delays[int(len(delays) * 0.99)] if delays else float("nan")
        print(
            f"watchers: {args.watchers} over {args.jobs} job(s) of {args.lines} lines at 10 lines/s, "
            f"{args.procs} client processes, {took:.0f} s"
        )
        print(f"broken streams: {len(broken)}" + (f" (e.g. {broken[0]})" if broken else ""))
        print(f"every line exactly once: {exact} of {args.watchers} watchers")
        if delays:
            print(
                f"line latency (worker read -> watcher): p50 {statistics.median(delays) * 1000:.1f} ms, "
                f"p99 {q99 * 1000:.1f} ms, max {delays[-1] * 1000:.1f} ms over {len(delays):,} line deliveries"
            )
        print(f"Redis connections: {base_clients} before, peak {peak['clients']}")
        print(
            f"server RSS ({args.server_workers} process(es), all together): {base_rss / 1024**2:.0f} MB before, "
            f"peak {peak['rss'] / 1024**2:.0f} MB"
        )


if __name__ == "__main__":
    main()
