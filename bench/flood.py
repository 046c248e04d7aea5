"""One student floods the server; another one goes on working (issue 52: admission, the queue's
lane and the stream cap). A real service as `raid dev` runs it; two students; the victim's job list
and /healthz are timed one request after another, first on a quiet server, then while the flooder
sends ``--flood`` requests at once, over and over, for ``--seconds``, in each of two ways:

- ``list``: the flooder's own job list (``GET /api/v1/jobs?limit=500``), computed by the server;
- ``download``: the flooder's finished log as text (``log.txt``, ``--lines`` lines), a stream
  once its answer has started (past admission; capped per student).

Printed: the victim's p50 / p99 / max during each flood as a ratio of the quiet server's, the
flooder's answers by status, and whether the victim's every request succeeded.

    .venv/bin/python bench/flood.py                     # 400 at once, 30 s each
    .venv/bin/python bench/flood.py --tiny              # CI's reduced form (tests/test_flood_bench.py)
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from service import Dev, project, raid_dev  # noqa: E402


def add_student(dev: Dev, name: str) -> tuple[str, str]:
    from raiprotocol.profile import read_profile_file

    prof = dev.tmp / f"{name}.profile"
    data = dev.tmp / "data"
    env = {**dev.env, "RAI_DATA_DIR": str(data), "RAI_SECRETS_FILE": str(data / "secrets.env")}
    cmd = [sys.executable, "-m", "raiserver.ops.cli", "add-user", name, "--server-url", dev.url, "--profile", str(prof)]
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    p = read_profile_file(prof)
    return p.access_key, p.secret_key


def finished_job(dev: Dev, name: str, lines: int) -> str:
    """A finished job of student ``name``'s that printed ``lines`` lines."""
    proj = project(dev.tmp / f"{name}-job", "rai/busybox:latest", [f"seq 1 {lines}"])
    prof = dev.tmp / f"{name}.profile"
    res = subprocess.run(dev.client("submit", "-p", str(proj)), env={**dev.env, "RAI_PROFILE": str(prof)}, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout.split("Job ", 1)[1].split()[0]


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


async def victim(url: str, auth: tuple[str, str], until: float) -> dict[str, list[float]]:
    """The other student's list and /healthz, one request after another, until ``until``."""
    got: dict[str, list[float]] = {"list": [], "healthz": [], "failed": []}
    why: collections.Counter[str] = collections.Counter()
    async with httpx.AsyncClient(base_url=url, auth=auth, timeout=120) as c:
        while time.monotonic() < until:
            for name, path in (("list", "/api/v1/jobs?limit=20"), ("healthz", "/healthz")):
                started = time.monotonic()
                try:
                    r = await c.get(path)
                    failure = "" if r.status_code == 200 else f"{name} {r.status_code}"
                except httpx.HTTPError as exc:
                    failure = f"{name} {type(exc).__name__}"
                got["failed" if failure else name].append(time.monotonic() - started)
                if failure:
                    why[failure] += 1
            await asyncio.sleep(0.05)
    if why:
        print(f"  the victim's failed requests, by what came back: {dict(why)}")
    return got


async def flooder(url: str, auth: tuple[str, str], path: str, at_once: int, until: float) -> collections.Counter[str]:
    """``at_once`` requests of ``path`` in flight, each sent again once answered, until ``until``."""
    statuses: collections.Counter[str] = collections.Counter()
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=at_once)

    async with httpx.AsyncClient(base_url=url, auth=auth, timeout=120, limits=limits) as c:

        async def one() -> None:
            while time.monotonic() < until:
                try:
                    async with c.stream("GET", path) as r:
                        async for _ in r.aiter_raw(1 << 16):
                            pass
                    statuses[str(r.status_code)] += 1
                except httpx.HTTPError as exc:
                    statuses[type(exc).__name__] += 1

        await asyncio.gather(*(one() for _ in range(at_once)))
    return statuses


async def phase(url: str, victim_auth: tuple[str, str], flood: tuple[tuple[str, str], str, int] | None, seconds: float) -> dict[str, Any]:
    until = time.monotonic() + seconds
    if flood is None:
        return {"victim": await victim(url, victim_auth, until)}
    watched, statuses = await asyncio.gather(victim(url, victim_auth, until), flooder(url, flood[0], flood[1], flood[2], until))
    return {"victim": watched, "flooder": dict(statuses)}


def figures(times: list[float]) -> dict[str, float]:
    return {
        "n": len(times),
        "p50": statistics.median(times) if times else float("nan"),
        "p99": pct(times, 0.99),
        "max": max(times, default=float("nan")),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flood", type=int, default=400, help="the flooder's requests at once")
    ap.add_argument("--seconds", type=float, default=30, help="each phase's length")
    ap.add_argument("--lines", type=int, default=200_000, help="lines of the flooder's finished log")
    ap.add_argument("--tiny", action="store_true", help="CI's reduced form: 60 at once, 5 s a phase")
    args = ap.parse_args(argv)
    if args.tiny:
        args.flood, args.seconds, args.lines = 60, 5.0, 200_000
    with raid_dev("process", {"RAI_SLOTS": "2"}) as dev:
        flood_auth, victim_auth = add_student(dev, "flooder"), add_student(dev, "victim")
        job = finished_job(dev, "flooder", args.lines)
        out: dict[str, Any] = {"flood": args.flood, "seconds": args.seconds}
        quiet = asyncio.run(phase(dev.url, victim_auth, None, args.seconds))
        out["quiet"] = {k: figures(v) for k, v in quiet["victim"].items() if k != "failed"}
        calm = out["quiet"]
        print(f"quiet server: the victim's list p50 {calm['list']['p50'] * 1e3:.1f} ms, /healthz p50 {calm['healthz']['p50'] * 1e3:.1f} ms")
        for name, path in (("list", "/api/v1/jobs?limit=500"), ("download", f"/api/v1/jobs/{job}/log.txt")):
            got = asyncio.run(phase(dev.url, victim_auth, (flood_auth, path, args.flood), args.seconds))
            v = {k: figures(t) for k, t in got["victim"].items() if k != "failed"}
            out[name] = {"victim": v, "victim_failed": len(got["victim"]["failed"]), "flooder": got["flooder"]}
            for what in ("list", "healthz"):
                q, f = out["quiet"][what], v[what]
                print(
                    f"{name} flood ({args.flood} at once): the victim's {what} p50 {f['p50'] / q['p50']:.1f}x, "
                    f"p99 {f['p99'] / q['p99']:.1f}x, max {f['max'] / q['max']:.1f}x the quiet server's "
                    f"({f['n']} requests, max {f['max'] * 1e3:.0f} ms)"
                )
            answers = dict(sorted(got["flooder"].items()))
            print(f"  the victim's failed requests: {out[name]['victim_failed']}; the flooder's answers: {answers}")
    return out


if __name__ == "__main__":
    main()
