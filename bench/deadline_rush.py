"""A deadline rush against a real rai, measuring whether the waits students are shown hold (issue 49).

The service runs as `raid dev` starts it (process executor, two worker slots). The kind has a
history first ("the days before": a few jobs of the same mix run to their end), then students
submit one job each, more and more of them as the deadline nears, jobs that `sleep` for mixed
lengths (3, 6, 10 and 20 s in equal shares, times --scale); every fourth student submits a second
job right after the first (fair share puts it behind later students who had no turn yet). For each
job the bench keeps what its submission was answered (the range and whether it is a guess) and
the wait it had (submitted -> started), and prints:

- coverage: the share of jobs whose wait fell inside the range shown at submit (issue 49: >= 90 %);
- the median, over jobs that waited, of the range's upper end / the wait (issue 49: <= 2);
- the same for the history's jobs (a cold service: guesses), fair share kept, and every job's line.

    .venv/bin/python bench/deadline_rush.py            # ~4 min: 40 students, 2 slots
    .venv/bin/python bench/deadline_rush.py --quick    # ~2 min: 20 students, lengths halved
    .venv/bin/python bench/deadline_rush.py --url http://HOST:8000 --profile admin.rai_profile
        # against a running deployment (its own slots and limits)
    .venv/bin/python bench/deadline_rush.py --fair [--url … --profile …] [--light 300 --heavy 0]
        # the fair-share rush (tests/test_fairshare.py): nobody waits behind more than one job of
        # any other student; against a deployment every student also follows their job's log live
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import math
import random
import statistics
import sys
import tarfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from raiprotocol.waits import wait_words  # noqa: E402

from service import raid_dev  # noqa: E402

MIX = (3.0, 6.0, 10.0, 20.0)  # seconds of `sleep`, in equal shares
WALL_SECONDS = 120  # the course's limit on a dev run here (a guess is bounded by it)


@dataclass(frozen=True)
class Rush:
    students: int = 40
    history: int = 8  # jobs run to their end before the rush: the kind's recent runs
    slots: int = 2
    spread: float = 90.0  # s over which the students arrive, more of them near the end
    scale: float = 1.0  # times the mix's lengths
    seed: int = 49


QUICK = Rush(students=20, history=6, spread=40.0, scale=0.5)
TINY = Rush(students=8, history=5, spread=8.0, scale=0.3)  # tests/test_deadline_rush.py: under a minute


@dataclass
class Seen:
    """One job: what its submission was answered, and what happened."""

    id: str
    owner: str
    phase: str  # history, rush, second (a student's second job)
    sleep: float
    position: int | None
    low: float | None
    high: float | None
    guess: str | None
    eta_seconds: float | None
    waited: float | None = None
    state: str = "queued"

    @property
    def held(self) -> bool:
        return self.waited is not None and self.low is not None and self.high is not None and self.low <= self.waited <= self.high


def sleep_tar(seconds: float) -> bytes:
    """A project whose one command sleeps ``seconds``."""
    spec = f'rai:\n  version: 0.2\n  image: rai/busybox:latest\ncommands:\n  build:\n    - "sleep {seconds:g}"\n'.encode()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("rai_build.yml")
        info.size = len(spec)
        tar.addfile(info, io.BytesIO(spec))
    return buf.getvalue()


def make_students(url: str, admin: tuple[str, str], names: list[str]) -> dict[str, tuple[str, str]]:
    roster = "username,name,email,team\n" + "".join(f"{n},{n} Student,{n}@x.edu,\n" for n in names)
    with httpx.Client(base_url=url, auth=admin, timeout=60) as c:
        r = c.post("/api/v1/admin/roster", content=roster.encode(), headers={"Content-Type": "text/csv"})
        r.raise_for_status()
        return {x["username"]: (x["access_key"], x["secret_key"]) for x in r.json()["created"]}


def submit(url: str, auth: tuple[str, str], owner: str, phase: str, seconds: float) -> Seen:
    """Submit as the client does; keep what the answer said about the wait."""
    with httpx.Client(base_url=url, auth=auth, timeout=60) as c:
        r = c.post("/api/v1/jobs", content=sleep_tar(seconds), headers={"Content-Type": "application/gzip"})
        r.raise_for_status()
        j = r.json()
    return Seen(
        j["id"], owner, phase, seconds, j.get("position"), j.get("eta_low"), j.get("eta_high"), j.get("eta_guess"), j.get("eta_seconds")
    )


def settle(url: str, admin: tuple[str, str], seen: list[Seen], timeout: float) -> list[dict]:
    """Wait for every job to end; fill in each one's wait (submitted -> started, the server's clock)."""
    deadline = time.monotonic() + timeout
    with httpx.Client(base_url=url, auth=admin, timeout=60) as c:
        while True:
            jobs = {j["id"]: j for j in c.get("/api/v1/jobs", params={"all": True, "limit": 500}).json()["jobs"]}
            if all(s.id in jobs and jobs[s.id]["state"] not in ("queued", "running") for s in seen):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"jobs still unfinished after {timeout:.0f} s")
            time.sleep(0.5)
    for s in seen:
        j = jobs[s.id]
        s.state = j["state"]
        if j.get("started_at"):
            s.waited = (datetime.fromisoformat(j["started_at"]) - datetime.fromisoformat(j["created_at"])).total_seconds()
    return [jobs[s.id] for s in seen]


def eta_rush(url: str, admin: tuple[str, str], rush: Rush) -> tuple[list[Seen], list[dict]]:
    """The history, then the rush; every job to its end."""
    rng = random.Random(rush.seed)
    names = [f"past{i:02d}" for i in range(rush.history)] + [f"student{i:03d}" for i in range(rush.students)]
    keys = make_students(url, admin, names)
    lengths = [MIX[i % len(MIX)] * rush.scale for i in range(rush.history + rush.students * 5 // 4 + 1)]
    rng.shuffle(lengths)
    seen: list[Seen] = []
    for name in names[: rush.history]:  # the days before: one after another, as they came
        seen.append(submit(url, keys[name], name, "history", lengths.pop()))
    settle(url, admin, seen, timeout=600)
    # the rush: arrivals denser towards the deadline (t = spread * sqrt(u))
    arrivals = sorted(rush.spread * math.sqrt(rng.random()) for _ in range(rush.students))
    lock = threading.Lock()

    def student(i: int, at: float, t0: float) -> None:
        time.sleep(max(at - (time.monotonic() - t0), 0.0))
        name = f"student{i:03d}"
        with lock:
            first, second = lengths.pop(), lengths.pop() if i % 4 == 3 else None
        got = [submit(url, keys[name], name, "rush", first)]
        if second is not None:
            got.append(submit(url, keys[name], name, "second", second))
        with lock:
            seen.extend(got)

    t0 = time.monotonic()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda ia: student(ia[0], ia[1], t0), enumerate(arrivals)))
    jobs = settle(url, admin, seen, timeout=1800)
    return seen, jobs


def figures(seen: list[Seen]) -> dict:
    """Coverage and the upper end's ratio to the wait (over jobs that waited at least 1 s)."""
    shown = [s for s in seen if s.waited is not None and s.high is not None]
    waited = [s for s in shown if s.waited is not None and s.waited >= 1.0]
    ratios = sorted((s.high or 0.0) / (s.waited or 1.0) for s in waited)
    return {
        "jobs": len(shown),
        "coverage": round(sum(s.held for s in shown) / len(shown), 3) if shown else None,
        "median_ratio": round(statistics.median(ratios), 2) if ratios else None,
        "waited": len(waited),
        "guesses": sum(s.guess is not None for s in shown),
    }


def eta_report(seen: list[Seen], jobs: list[dict], rush: Rush, took: float, where: str) -> dict:
    rushed = [s for s in seen if s.phase != "history"]
    out = {
        "where": where,
        "rush": asdict(rush),
        "took_s": round(took, 1),
        "states": {st: sum(s.state == st for s in seen) for st in sorted({s.state for s in seen})},
        "rush_figures": figures(rushed),
        "first_jobs": figures([s for s in seen if s.phase == "rush"]),
        "second_jobs": figures([s for s in seen if s.phase == "second"]),
        "history_figures": figures([s for s in seen if s.phase == "history"]),
        "fair_share_excess": max_behind_one_user([j for j in jobs if j.get("released_at")]),
    }
    f = out["rush_figures"]
    print(
        f"{len(rushed)} rush jobs from {rush.students} students ({rush.slots} slots, sleeps of "
        f"{', '.join(f'{m * rush.scale:g}' for m in MIX)} s, arrivals over {rush.spread:g} s), "
        f"after {rush.history} jobs of history; {where}; {took:.0f} s; states {out['states']}"
    )
    print(f"  coverage: {f['coverage']:.1%} of {f['jobs']} jobs waited within the range shown at submit (goal >= 90 %)")
    print(f"  upper end / wait, median over the {f['waited']} jobs that waited >= 1 s: {f['median_ratio']} (goal <= 2)")
    print(f"  ranges that said they were a guess: {f['guesses']}")
    for label, key in (("students' first jobs", "first_jobs"), ("second jobs (behind later students)", "second_jobs")):
        g = out[key]
        if g["jobs"]:
            print(f"    {label}: coverage {g['coverage']:.1%} of {g['jobs']}, median ratio {g['median_ratio']}")
    h = out["history_figures"]
    if h["jobs"]:
        print(f"  the history's own jobs (a cold service): coverage {h['coverage']:.1%} of {h['jobs']}, {h['guesses']} guesses")
    print(f"  jobs of one other student released during a wait, beyond one per own job ahead: {out['fair_share_excess']} (0 = fair)")
    print("  job       phase    sleep  pos  shown at submit                                        waited  held")
    for s in seen:
        said = wait_words(s.low, s.high, s.guess, s.eta_seconds) or "-"
        waited = f"{s.waited:6.1f}" if s.waited is not None else "     -"
        print(f"  {s.id[-8:]}  {s.phase:7s}  {s.sleep:5.1f}  {s.position or '-':>3}  {said[:54]:54s} {waited}  {'yes' if s.held else 'NO'}")
    return out


# -- the fair-share rush (tests/test_fairshare.py; --fair): many one-job students and a few with ten

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


def fair_report(jobs: list[dict], args: argparse.Namespace, took: float, where: str) -> None:
    states = {s: sum(j["state"] == s for j in jobs) for s in {j["state"] for j in jobs}}
    print(f"{len(jobs)} jobs ({args.light} students × 1, {args.heavy} students × {args.per_heavy}), {where}, {took:.1f} s; states {states}")
    for cls in ("light", "heavy"):
        w = waits(jobs, cls)
        if w:
            print(f"  {cls:5s} students: wait p50 {pct(w, 0.5):6.2f} s   p95 {pct(w, 0.95):6.2f} s   max {w[-1]:6.2f} s   (n={len(w)})")
    print(f"  jobs of one other student released during a wait, beyond one per own job ahead: {max_behind_one_user(jobs)} (0 = fair)")


@contextmanager
def local_service(rush: Rush, active: int = 2) -> Iterator[tuple[str, tuple[str, str]]]:
    """rai as `raid dev` runs it: process executor, ``rush.slots`` slots, no per-student throttles
    in the way of a rush."""
    from raiprotocol.profile import read_profile_file

    env = {
        "RAI_SLOTS": str(rush.slots),
        "RAI_MAX_ACTIVE_JOBS": str(active),
        "RAI_SUBMISSIONS_PER_MINUTE": "1000",
        "RAI_STAFF_PRIORITY": "false",
        "RAI_WALL_SECONDS": str(WALL_SECONDS),
    }
    with raid_dev("process", extra_env=env) as dev:
        p = read_profile_file(dev.profile)
        yield dev.url, (p.access_key, p.secret_key)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="20 students, lengths halved: ~2 min")
    ap.add_argument("--tiny", action="store_true", help="8 students, a few seconds each: under a minute (the test's form)")
    ap.add_argument("--students", type=int)
    ap.add_argument("--slots", type=int)
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--url", help="a running rai (e.g. the compose stack) instead of starting one here")
    ap.add_argument("--profile", type=Path, help="with --url: an admin's profile")
    ap.add_argument(
        "--fair", action="store_true", help="the fair-share rush instead: --light one-job students, --heavy with --per-heavy each"
    )
    ap.add_argument("--light", type=int, default=200)
    ap.add_argument("--heavy", type=int, default=10)
    ap.add_argument("--per-heavy", type=int, default=10)
    args = ap.parse_args(argv)
    rush = TINY if args.tiny else QUICK if args.quick else Rush()
    if args.students or args.slots:
        rush = Rush(
            **{**asdict(rush), **({"students": args.students} if args.students else {}), **({"slots": args.slots} if args.slots else {})}
        )
    t0 = time.monotonic()
    if args.url:
        from raiprotocol.profile import read_profile_file

        p = read_profile_file(args.profile)
        admin = (p.access_key, p.secret_key)
        if args.fair:  # every student also follows their job's log live: broken streams and 5xx answers too
            jobs = run_rush(args.url, admin, args.light, args.heavy, args.per_heavy, follow_logs=True)
            fair_report(jobs, args, time.monotonic() - t0, "the deployment's workers")
            broken = [j["stream_problem"] for j in jobs if j["stream_problem"]]
            print(
                f"  live log streams: {len(jobs) - len(broken)} of {len(jobs)} ran to the job's end unbroken"
                + (f"; e.g. {broken[0]}" if broken else "")
            )
            print(f"  5xx answers: {len(FIVE_XX)}" + (f" ({FIVE_XX[:3]})" if FIVE_XX else ""))
            return {}
        seen, jobs = eta_rush(args.url, admin, rush)
        out = eta_report(seen, jobs, rush, time.monotonic() - t0, f"the deployment at {args.url}")
    else:
        with local_service(rush, active=max(args.per_heavy, 2) if args.fair else 2) as (url, admin):
            if args.fair:
                jobs = run_rush(url, admin, args.light, args.heavy, args.per_heavy)
                fair_report(jobs, args, time.monotonic() - t0, f"raid dev, {rush.slots} slots")
                return {}
            seen, jobs = eta_rush(url, admin, rush)
            out = eta_report(seen, jobs, rush, time.monotonic() - t0, "raid dev, process executor")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
