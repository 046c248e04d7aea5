"""A deadline rush against a running rai: many students submit one job, a few submit ten, two
worker slots serve them. Reports wait times (p50/p95/max) per class of student and checks the
fair-share promise: nobody waits behind more than one job of any other student.

    .venv/bin/python bench/deadline_rush.py            # starts its own service (process executor)
    .venv/bin/python bench/deadline_rush.py --url http://HOST:8000 --profile admin.rai_profile --light 300 --heavy 0
        # against a running deployment (the compose stack): every student also follows their
        # job's log live; prints broken streams and 5xx answers as well
"""

from __future__ import annotations

import argparse
import asyncio
import io
import sys
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

import httpx

SPEC = b'rai:\n  version: 0.2\n  image: rai/busybox:latest\ncommands:\n  build:\n    - "true"\n'


def project_tar() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("rai_build.yml")
        info.size = len(SPEC)
        tar.addfile(info, io.BytesIO(SPEC))
    return buf.getvalue()


FIVE_XX: list[str] = []  # every 5xx answer seen (a deployment must give none)


async def follow(url: str, auth: tuple[str, str], job_id: str) -> str | None:
    """Follow one job's log to its end as the client does (resuming with Last-Event-ID, honouring
    Retry-After); None if the stream ended properly, else what broke."""
    from raiprotocol import logwire

    last, problem = 0, None
    async with httpx.AsyncClient(base_url=url, auth=auth, timeout=httpx.Timeout(30, read=120)) as c:
        for _ in range(20):
            try:
                headers = {"Last-Event-ID": str(last)} if last else {}
                async with c.stream("GET", f"/api/v1/jobs/{job_id}/log", headers=headers) as resp:
                    if resp.status_code >= 500:
                        FIVE_XX.append(f"log {resp.status_code}")
                    if resp.status_code in (429, 503):
                        await asyncio.sleep(float(resp.headers.get("Retry-After", "1")))
                        continue
                    if resp.status_code != 200:
                        return f"HTTP {resp.status_code}"
                    event = None
                    async for raw in resp.aiter_lines():
                        if raw.startswith("event:"):
                            event = raw[6:].strip()
                        elif raw.startswith("data:") and event == "lines":
                            last = logwire.loads(raw[5:])[-1].last
                        elif raw.startswith("data:") and event == "end":
                            return problem
                problem = "a stream closed before the job's end (resumed)"
            except httpx.HTTPError as exc:
                problem = f"{exc.__class__.__name__} (resumed)"
    return problem or "gave up"


def run_rush(
    url: str,
    admin_auth: tuple[str, str],
    light: int,
    heavy: int,
    per_heavy: int,
    timeout: float = 600,
    start_workers=None,
    follow_logs: bool = False,
) -> list[dict]:
    """Create the students, submit (heavy students first, the worst case), start the workers
    (``start_workers``: the moment of the deadline, when everything is in), wait for every job."""
    with httpx.Client(base_url=url, auth=admin_auth, timeout=60) as admin:
        names = [f"light{i:03d}" for i in range(light)] + [f"heavy{i:02d}" for i in range(heavy)]
        roster = "username,name,email,team\n" + "".join(f"{n},{n} Student,{n}@x.edu,\n" for n in names)
        created = admin.post("/api/v1/admin/roster", content=roster.encode(), headers={"Content-Type": "text/csv"})
        created.raise_for_status()
        keys = {c["username"]: (c["access_key"], c["secret_key"]) for c in created.json()["created"]}
    body = project_tar()
    plan = [n for n in names if n.startswith("heavy") for _ in range(per_heavy)] + [n for n in names if n.startswith("light")]

    def submit(name: str) -> tuple[str, str]:
        with httpx.Client(base_url=url, auth=keys[name], timeout=60) as c:
            r = c.post("/api/v1/jobs", content=body, headers={"Content-Type": "application/gzip"})
            if r.status_code >= 500:
                FIVE_XX.append(f"submit {r.status_code}")
            r.raise_for_status()
            return name, r.json()["id"]

    submitted = [submit(n) for n in plan if n.startswith("heavy")]  # heavy ones strictly first
    with ThreadPoolExecutor(16) as pool:
        submitted += list(pool.map(submit, [n for n in plan if n.startswith("light")]))
    if start_workers is not None:
        start_workers()
    followers = None
    if follow_logs:

        async def follow_every() -> list:
            return await asyncio.gather(*(follow(url, keys[n], i) for n, i in submitted))

        followers = ThreadPoolExecutor(1).submit(asyncio.run, follow_every())
    deadline = time.monotonic() + timeout
    with httpx.Client(base_url=url, auth=admin_auth, timeout=60) as admin:
        while True:
            jobs = admin.get("/api/v1/jobs", params={"all": True, "limit": 500}).json()["jobs"]
            mine = {j["id"]: j for j in jobs}
            done = [mine[i] for _, i in submitted if i in mine and mine[i]["state"] not in ("queued", "running")]
            if len(done) == len(submitted):
                result = [mine[i] for _, i in submitted]
                if followers is not None:
                    for job, broke in zip(result, followers.result(timeout=300), strict=False):
                        job["stream_problem"] = broke
                return result
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(done)}/{len(submitted)} jobs finished in {timeout:.0f} s")
            time.sleep(0.5)


def ts(s: str) -> datetime:
    return datetime.fromisoformat(s)


def max_behind_one_user(jobs: list[dict]) -> int:
    """The fair-share promise, checked: while a job waited, how many jobs of one other student
    were released to the workers, beyond one per job of its own owner still waiting ahead of it.
    0 = kept."""
    worst = 0
    for j in jobs:
        t0, t1 = ts(j["created_at"]), ts(j["released_at"])
        ahead = sum(1 for k in jobs if k["owner"] == j["owner"] and ts(k["created_at"]) < t0 and ts(k["released_at"]) > t0)
        per_user: dict[str, int] = {}
        for k in jobs:
            if k["owner"] != j["owner"] and t0 < ts(k["released_at"]) < t1:
                per_user[k["owner"]] = per_user.get(k["owner"], 0) + 1
        worst = max([worst, *(n - (ahead + 1) for n in per_user.values())])
    return worst


def waits(jobs: list[dict], prefix: str) -> list[float]:
    return sorted((ts(j["started_at"]) - ts(j["created_at"])).total_seconds() for j in jobs if j["owner"].startswith(prefix))


def pct(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--light", type=int, default=200)
    ap.add_argument("--heavy", type=int, default=10)
    ap.add_argument("--per-heavy", type=int, default=10)
    ap.add_argument("--url", help="a running rai (e.g. the compose stack) instead of starting one here")
    ap.add_argument("--profile", type=Path, help="with --url: an admin's profile")
    args = ap.parse_args()
    if args.url:
        from raiprotocol.profile import read_profile_file

        p = read_profile_file(args.profile)
        t0 = time.monotonic()
        jobs = run_rush(args.url, (p.access_key, p.secret_key), args.light, args.heavy, args.per_heavy, follow_logs=True)
        report(jobs, args, time.monotonic() - t0, "the deployment's workers")
        broken = [j["stream_problem"] for j in jobs if j["stream_problem"]]
        print(
            f"  live log streams: {len(jobs) - len(broken)} of {len(jobs)} ran to the job's end unbroken"
            + (f"; e.g. {broken[0]}" if broken else "")
        )
        print(f"  5xx answers: {len(FIVE_XX)}" + (f" ({FIVE_XX[:3]})" if FIVE_XX else ""))
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    import shutil as _sh
    import subprocess
    import tempfile

    import redis  # noqa: F401

    from raiprotocol.profile import read_profile_file

    from conftest import start_service  # the test suite's launcher: real Redis, server, worker

    tmp = Path(tempfile.mkdtemp(prefix="rai-rush-"))
    port = __import__("conftest").free_port()
    rproc = subprocess.Popen([_sh.which("redis-server"), "--port", str(port), "--save", "", "--dir", str(tmp)], stdout=subprocess.DEVNULL)
    time.sleep(0.5)
    svc = start_service(
        tmp,
        f"redis://127.0.0.1:{port}/0",
        None,
        "process",
        slots=2,
        worker=False,
        extra_env={"RAI_MAX_ACTIVE_JOBS": str(args.per_heavy), "RAI_SUBMISSIONS_PER_MINUTE": "1000", "RAI_STAFF_PRIORITY": "false"},
    )
    try:
        p = read_profile_file(svc.profile)
        t0 = time.monotonic()
        jobs = run_rush(
            svc.url, (p.access_key, p.secret_key), args.light, args.heavy, args.per_heavy, start_workers=lambda: svc.start_worker("w1")
        )
        took = time.monotonic() - t0
    finally:
        svc.shutdown()
        rproc.terminate()
    report(jobs, args, took, "2 slots, all in before the workers start")


def report(jobs: list[dict], args, took: float, where: str) -> None:
    states = {s: sum(j["state"] == s for j in jobs) for s in {j["state"] for j in jobs}}
    print(f"{len(jobs)} jobs ({args.light} students × 1, {args.heavy} students × {args.per_heavy}), {where}, {took:.1f} s; states {states}")
    for cls in ("light", "heavy"):
        w = waits(jobs, cls)
        if w:
            print(f"  {cls:5s} students: wait p50 {pct(w, 0.5):6.2f} s   p95 {pct(w, 0.95):6.2f} s   max {w[-1]:6.2f} s   (n={len(w)})")
    print(f"  jobs of one other student released during a wait, beyond one per own job ahead: {max_behind_one_user(jobs)} (0 = fair)")


if __name__ == "__main__":
    main()
