"""Issue 38 on the H100: a deadline's development runs drained through the whole service (server,
Redis, the Docker worker, rai/ece408:cuda13 with the GPU by device nodes) with 1, 4 and 8 jobs per
GPU (RAI_JOBS_PER_GPU), and an exclusive run (what ranked runs get) submitted mid-rush. Prints the
figures and the ratios between them; writes them to $OUT/share-figures.json.

    python3 bench/gpu_container.py setup && python3 bench/gpu_share.py 8 4   # then: python3 bench/gpu_share.py 1

Each drain: STUDENTS students submit JOBS_EACH development runs each at once (the course's
development commands without nsys: the build, the run on 10,000 images, ncu SpeedOfLight on 100,
as the issue's bare measurement), the service drains them; time to drain, wait (submission to the
job's first command) p50/p95, every job's state and accuracy, ncu errors, the most GPU memory in
use (nvidia-smi every 0.5 s). ``idle`` runs the exclusive project alone first: its op time on an
idle GPU, against the same project's op time when submitted a third of the way into the K=8 rush.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_container as gc  # noqa: E402 - the engine, image and paths made by its setup step

ROOT, OUT = gc.ROOT, gc.OUT
STUDENTS, JOBS_EACH = int(os.environ.get("STUDENTS", "20")), int(os.environ.get("JOBS_EACH", "2"))
DEV = ['/bin/sh -c "cp -r /src/* /build"', "make m2", "/usr/bin/time ./m2 10000"]
if os.environ.get("NCU", "1") == "1":  # NCU=0: without the profiler (concurrent ncu in containers fails: see the README)
    DEV.append("ncu --section SpeedOfLight ./m2 100")
figures: dict[str, object] = json.loads((OUT / "share-figures.json").read_text()) if (OUT / "share-figures.json").exists() else {}


def save() -> None:
    (OUT / "share-figures.json").write_text(json.dumps(figures, indent=2, default=str))


def project(name: str, exclusive: bool) -> Path:
    p = Path(f"/tmp/rai-share-{name}")
    shutil.rmtree(p, ignore_errors=True)
    shutil.copytree(ROOT / "examples/ece408-conv", p, ignore=shutil.ignore_patterns("m1", "m2", "opt", "obj", "profile*"))
    cmds = "".join(f"    - {json.dumps(c)}\n" for c in DEV)
    gpu = "    count: 1\n" + ("    exclusive: true\n" if exclusive else "")
    (p / "rai_build.yml").write_text(f"rai:\n  version: 0.2\n  image: {gc.IMAGE}\nresources:\n  gpu:\n{gpu}commands:\n  build:\n{cmds}")
    return p


class MemoryWatch(threading.Thread):
    """The most GPU memory in use (MiB, all GPUs summed) while a drain runs."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.most, self.stop = 0, threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.5):
            out = gc.sh("nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits").stdout
            used = sum(int(x) for x in re.findall(r"\d+", out))
            self.most = max(self.most, used)


def students(env: dict[str, str], w: Path) -> list[Path]:
    """STUDENTS students from one roster import (their profiles in w/profiles)."""
    roster = w / "roster.csv"
    roster.write_text("username,name,email,team\n" + "".join(f"s{i:02d},Student {i},s{i}@example.edu,t{i:02d}\n" for i in range(STUDENTS)))
    admin = {**env, "RAI_PROFILE": f"{w}/alice.profile"}
    subprocess.run(
        [sys.executable, "-m", "raiclient", "admin", "roster", "import", str(roster), "--out", f"{w}/profiles"],
        env=admin,
        check=True,
        capture_output=True,
        text=True,
        cwd=w,
    )
    return sorted((w / "profiles").glob("*.rai_profile"))


def submit(env: dict[str, str], profile: Path, proj: Path) -> str:
    res = subprocess.run(
        [sys.executable, "-m", "raiclient", "submit", "-p", str(proj), "--detach"],
        env={**env, "RAI_PROFILE": str(profile)},
        capture_output=True,
        text=True,
    )
    found = re.search(r"\b([0-9A-Z]{26})\b", res.stdout + res.stderr)
    if not found:
        raise SystemExit(f"submit failed: {res.stdout}{res.stderr}")
    return found[1]


def first_command(job: dict) -> datetime | None:
    at = [p["at"] for p in job.get("phases") or [] if p["name"] == "command started"]
    return datetime.fromisoformat(at[0]) if at else None


def op_time(text: str) -> float | None:
    """The sum of the layers' op times printed by the run on 10,000 images (not ncu's replays)."""
    text = text.split("ncu --section")[0]
    times = [float(x) for x in re.findall(r"^Op Time: ([\d.e-]+)", text, re.M)]
    return sum(times) if times else None


def drain(k: int, with_exclusive: bool) -> None:
    import httpx

    k_name = f"k{k}" + ("" if os.environ.get("NCU", "1") == "1" else "-no-ncu")
    w = Path(f"/tmp/rai-share-k{k}")
    env, procs = gc.service(
        w,
        f"share-bench-{k}",
        extra={
            "RAI_JOBS_PER_GPU": str(k),
            "RAI_MAX_ACTIVE_JOBS": "10",
            "RAI_SUBMISSIONS_PER_MINUTE": "1000",
            "RAI_STAFF_PRIORITY": "false",
            "RAI_WORKER_DEAD_AFTER": "60",
        },
    )
    auth = gc._auth(w)
    base = env["RAI_SERVER_URL"]
    try:
        profiles = students(env, w)
        dev, alone = project("dev", False), project("alone", True)
        mem = MemoryWatch()
        mem.start()
        t0 = time.time()
        orders = [p for _ in range(JOBS_EACH) for p in profiles]
        ranked: list[str] = []
        with ThreadPoolExecutor(8) as pool:
            ids = list(pool.map(lambda p: submit(env, p, dev), orders))
        submitted = time.time() - t0
        limit = t0 + float(os.environ.get("DRAIN_LIMIT", "420"))
        progress = OUT / f"progress-k{k}.txt"

        def states(h: httpx.Client, which: list[str]) -> dict[str, dict]:
            jobs = {i: h.get(f"/api/v1/jobs/{i}").json() for i in which}
            counts: dict[str, int] = {}
            for j in jobs.values():
                counts[j["state"]] = counts.get(j["state"], 0) + 1
            with progress.open("a") as fh:
                fh.write(f"{time.time() - t0:6.1f} s {counts}\n")
            return jobs

        with httpx.Client(base_url=base, auth=auth, timeout=30) as h:
            if with_exclusive:  # a third of the way into the drain, judged by ended jobs
                while time.time() < limit and sum(j["state"] not in ("queued", "running") for j in states(h, ids).values()) < len(ids) // 3:
                    time.sleep(2)
                ranked.append(submit(env, Path(f"{w}/alice.profile"), alone))
            while True:
                jobs = states(h, ids + ranked)
                if all(j["state"] not in ("queued", "running") for j in jobs.values()) or time.time() > limit:
                    break
                time.sleep(2)
            logs = {i: h.get(f"/api/v1/jobs/{i}/log.txt").text for i in ids + ranked}
            metrics = h.get("/metrics").text
        mem.stop.set()
        ends = [datetime.fromisoformat(j["finished_at"]).timestamp() for j in jobs.values() if j.get("finished_at")] or [time.time()]
        waits = sorted(
            started.timestamp() - datetime.fromisoformat(jobs[i]["created_at"]).timestamp()
            for i in ids
            if (started := first_command(jobs[i])) is not None
        ) or [0.0]
        acc = [max((jobs[i]["results"] or {}).get("correctness", {}).values() or [0.0]) for i in ids]
        out: dict[str, object] = {
            "jobs": len(ids),
            "unfinished": sum(j["state"] in ("queued", "running") for j in jobs.values()),
            "submitted_in_s": round(submitted, 1),
            "drain_s": round(max(ends) - t0, 1),
            "wait_p50_s": round(statistics.median(waits), 1),
            "wait_p95_s": round(waits[int(0.95 * (len(waits) - 1))], 1),
            "states": sorted({j["state"] for j in jobs.values()}),
            "accuracy": sorted(set(acc)),
            "all_correct": all(jobs[i]["state"] == "succeeded" and a >= 0.8 for i, a in zip(ids, acc, strict=False)),
            "ncu_errors": sum("==ERROR==" in logs[i] for i in ids),
            "gpu_memory_most_mib": mem.most,
            "gpu_shared_with_most": max(((jobs[i]["results"] or {}).get("gpu_shared_with") or 0) for i in ids),
            "op_times_ms": sorted(round(1000 * t, 3) for t in (op_time(logs[i]) for i in ids) if t is not None),
            "worker_line": next((line for line in Path(w / "worker.log").read_text().splitlines() if "slots" in line), "").strip()[:300],
            "metrics_gpu": [line for line in metrics.splitlines() if line.startswith("rai_gpu_")],
        }
        if ranked:
            r = jobs[ranked[0]]
            started = first_command(r)
            out["exclusive"] = {
                "state": r["state"],
                "op_time_ms": round(1000 * (op_time(logs[ranked[0]]) or 0), 4),
                "waited_s": round(started.timestamp() - datetime.fromisoformat(r["created_at"]).timestamp(), 1) if started else None,
                "shared_with": (r["results"] or {}).get("gpu_shared_with"),
                "log_says": [line for line in logs[ranked[0]].splitlines() if "exclusive" in line or "shared" in line],
            }
            (OUT / f"share-k{k}-exclusive.txt").write_text(logs[ranked[0]])
        (OUT / f"share-k{k}-job.txt").write_text(logs[ids[-1]])
        failed = [i for i in ids if jobs[i]["state"] != "succeeded"]
        if failed:
            (OUT / f"share-k{k}-failed.txt").write_text(logs[failed[0]])
        figures[k_name] = out
        save()
        gc.say(f"K={k}: {json.dumps(out, default=str)}")
    finally:
        for name in ("worker.log", "server.log"):
            if (w / name).exists():
                (OUT / f"share-k{k}-{name}").write_text((w / name).read_text()[-200_000:])
        for p in reversed(procs):
            p.terminate()
        time.sleep(2)
        gc.sh("docker ps -aq --filter label=rai.worker=h100 | xargs -r docker rm -f")


def idle() -> None:
    """The exclusive project alone, three times: its op time on an idle GPU."""
    w = Path("/tmp/rai-share-idle")
    env, procs = gc.service(w, "share-bench-idle")
    try:
        alone = project("alone", True)
        cenv = {**env, "RAI_PROFILE": f"{w}/alice.profile"}
        times = []
        for _ in range(3):
            res = subprocess.run([sys.executable, "-m", "raiclient", "submit", "-p", str(alone)], env=cenv, capture_output=True, text=True)
            t = op_time(res.stdout)
            if t is not None:
                times.append(round(1000 * t, 4))
        figures["idle_exclusive_op_ms"] = times
        save()
        gc.say(f"idle exclusive op times (ms): {times}")
    finally:
        for p in reversed(procs):
            p.terminate()
        time.sleep(2)


def memhog() -> None:
    """K = 4: a run that holds 30 GiB of the H100's 80 (its share: 20) beside an honest run of 2 GiB;
    the hog is killed with the line that says why, the honest one ends well."""
    import httpx

    w = Path("/tmp/rai-share-memhog")
    env, procs = gc.service(w, "share-bench-memhog", extra={"RAI_JOBS_PER_GPU": "4", "RAI_SUBMISSIONS_PER_MINUTE": "1000"})
    try:
        runs = {}
        for name, gib in (("hog", 30), ("honest", 2)):
            p = Path(f"/tmp/rai-share-{name}")
            shutil.rmtree(p, ignore_errors=True)
            p.mkdir()
            shutil.copy(ROOT / "bench/memhog/hog.cu", p / "hog.cu")
            (p / "rai_build.yml").write_text(
                f"rai:\n  version: 0.2\n  image: {gc.IMAGE}\nresources:\n  gpu:\n    count: 1\n"
                f"commands:\n  build:\n    - nvcc -o /build/hog /src/hog.cu\n    - /build/hog {gib} 15\n"
            )
            runs[name] = submit(env, Path(f"{w}/alice.profile"), p)
        with httpx.Client(base_url=env["RAI_SERVER_URL"], auth=gc._auth(w), timeout=30) as h:
            deadline = time.time() + 240
            while time.time() < deadline:
                jobs = {n: h.get(f"/api/v1/jobs/{i}").json() for n, i in runs.items()}
                if all(j["state"] not in ("queued", "running") for j in jobs.values()):
                    break
                time.sleep(2)
            logs = {n: h.get(f"/api/v1/jobs/{i}/log.txt").text for n, i in runs.items()}
        figures["memhog"] = {
            n: {
                "state": jobs[n]["state"],
                "message": jobs[n].get("message"),
                "said": [x for x in logs[n].splitlines() if "GPU memory" in x or "holding" in x][-3:],
            }
            for n in runs
        }
        for n in runs:
            (OUT / f"memhog-{n}.txt").write_text(logs[n])
        save()
        gc.say(f"memhog: {json.dumps(figures['memhog'])}")
    finally:
        for p in reversed(procs):
            p.terminate()
        time.sleep(2)


def ratios() -> None:
    ks = {int(k[1:].split("-")[0]): v for k, v in figures.items() if re.fullmatch(r"k\d+-no-ncu", k)}
    if 1 in ks:
        figures["drain_vs_k1"] = {f"k{k}": round(v["drain_s"] / ks[1]["drain_s"], 3) for k, v in ks.items()}
    idle_ms = figures.get("idle_exclusive_op_ms")
    for _k, v in ks.items():
        if idle_ms and v.get("exclusive", {}).get("op_time_ms"):
            v["exclusive"]["vs_idle"] = round(v["exclusive"]["op_time_ms"] / statistics.median(idle_ms), 4)  # type: ignore[arg-type]
    save()
    gc.say(f"ratios: {figures.get('drain_vs_k1')}")


if __name__ == "__main__":
    gc.setup()
    for arg in sys.argv[1:]:
        if arg == "idle":
            idle()
        elif arg == "memhog":
            memhog()
        else:
            drain(int(arg), with_exclusive=int(arg) > 1)
    ratios()
