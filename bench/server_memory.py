"""Does the service's memory stay flat over many jobs? Starts a private Redis, the server and one
worker (process executor, 2 slots), then submits N trivial jobs (`echo hi`) one after another
through the real client's submit (``raiclient.submit.run``, in this process: the same requests as
``raiclient submit``, upload then the live log until the end, without a Python start per job), and
every ``--every`` jobs samples RSS (VmRSS) and open descriptors of the server, the worker's main
process and its pool processes. Prints the figures, KB per job over the second half (after the
warm-up) and the growth's ratio to the first sample; no absolute time is asserted.

    .venv/bin/python bench/server_memory.py [-n 1500] [--every 250] [--pg] [--inside | --trace server,worker]

``--inside``: the server and the worker's pool processes write where their memory is (Python,
SQLite, malloc's free bytes) every ``--every`` jobs, into the run's folder (printed at the end);
``--trace``: with tracemalloc's allocation sites that grew too. How issue 51's leak was found.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from helpers import Service, fresh_pg, make_project, redis_binary, start_redis, start_service, wait_for  # noqa: E402
from helpers.procs import descriptors, rss_kib  # noqa: E402

# Loaded (PYTHONPATH) into the server and the worker with --inside: it writes, to
# RAI_BENCH_TRACE_DIR, where the process's memory is: Python's live blocks, SQLite's own
# allocations, glibc malloc's in-use and free bytes, threads, the object counts that grew since the
# last time, and with --trace (tracemalloc from the first figures on) the allocation sites that
# grew. The server writes on SIGUSR1 (each sample); a pool process of the worker after every
# RAI_BENCH_POOL_EVERY jobs it ran (Celery resets SIGUSR1 in its pool processes).
SITECUSTOMIZE = """
import os, sys
_ROLE = "server" if "raiserver.ops.cli" in sys.orig_argv else "worker" if "raiworker.cli" in sys.orig_argv else None
if _ROLE and os.environ.get("RAI_BENCH_TRACE_DIR"):
    import collections, ctypes, gc, signal, threading, tracemalloc

    class _Mallinfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in
                    "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]

    _libc = ctypes.CDLL("libc.so.6")
    _libc.mallinfo2.restype = _Mallinfo2
    _sqlite = ctypes.CDLL("libsqlite3.so.0")
    _sqlite.sqlite3_memory_used.restype = ctypes.c_int64
    _state = {"snap": None, "types": None, "n": 0, "jobs": 0}

    def _dump(name):
        trace = _ROLE in os.environ.get("RAI_BENCH_TRACEMALLOC", "").split(",")
        if trace and not tracemalloc.is_tracing():  # from the first figures on: start-up's imports untraced
            tracemalloc.start(16)
        gc.collect()
        m = _libc.mallinfo2()
        out = [
            f"python blocks {sys.getallocatedblocks()}; sqlite {_sqlite.sqlite3_memory_used() // 1024} KiB; "
            f"malloc in use {(m.uordblks + m.hblkhd) // 1024} KiB, free {m.fordblks // 1024} KiB, "
            f"from the system {(m.arena + m.hblkhd) // 1024} KiB; threads {threading.active_count()}"
        ]
        types = collections.Counter(type(o).__qualname__ for o in gc.get_objects())
        if _state["types"] is not None:
            grew = (types - _state["types"]).most_common(25)
            out.append("objects that grew: " + ", ".join(f"{k} +{v}" for k, v in grew))
        snap = None
        if trace:
            snap = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
            if _state["snap"] is not None:
                stats = snap.compare_to(_state["snap"], "traceback")
                out.append(f"traced: {sum(s.size_diff for s in stats) / 1024:+.1f} KiB in all")
                for stat in stats[:15]:
                    out.append(f"{stat.size_diff / 1024:+.1f} KiB {stat.count_diff:+d} blocks")
                    out.extend(f"    {f.filename}:{f.lineno}" for f in list(stat.traceback)[-12:])
        _state.update(snap=snap, types=types, n=_state["n"] + 1)
        path = os.path.join(os.environ["RAI_BENCH_TRACE_DIR"], f"inside-{name}-{_state['n']:03d}.txt")
        with open(path + ".part", "w") as fh:
            fh.write("\\n".join(out) + "\\n")
        os.replace(path + ".part", path)

    if _ROLE == "server":
        signal.signal(signal.SIGUSR1, lambda signum, frame: _dump("server"))
    else:
        from celery.signals import task_postrun

        def _ran(**_):
            _state["jobs"] += 1
            if _state["jobs"] % int(os.environ.get("RAI_BENCH_POOL_EVERY", "250")) == 0:
                _dump(f"pool{os.getpid()}")

        task_postrun.connect(_ran, weak=False)
"""


def pool_pids(main: int) -> list[int]:
    """The worker's pool processes: its main process's children."""
    try:
        return [int(p) for p in Path(f"/proc/{main}/task/{main}/children").read_text().split()]
    except OSError:
        return []


def sample(svc: Service, trace: Path | None) -> dict[str, tuple[int, int]]:
    """(RSS KiB, descriptors) of the server, the worker's main process and each pool process."""
    server, worker = svc.procs["server"].pid, svc.procs["worker-w1"].pid
    procs = {"server": server, "worker": worker, **{f"pool[{p}]": p for p in pool_pids(worker)}}
    if trace is not None:
        before = len(list(trace.glob("inside-server-*.txt")))
        os.kill(server, signal.SIGUSR1)
        wait_for(lambda: len(list(trace.glob("inside-server-*.txt"))) > before, timeout=300, what="the server's own figures")
    return {k: (rss_kib(p), descriptors(p)) for k, p in procs.items()}


def submit_one(proj: Path) -> None:
    """One ``raiclient submit`` of the project, followed to its end; stops the bench if it failed."""
    from raiclient.submit import run

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = run(proj, None, "dev", False, None)
    if code != 0 or "hi" not in out.getvalue():
        raise SystemExit(f"a job did not succeed (exit {code}):\n{out.getvalue()[-2000:]}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=1500)
    ap.add_argument("--every", type=int, default=250)
    ap.add_argument("--pg", action="store_true", help="PostgreSQL (RAI_TEST_PG) instead of SQLite")
    ap.add_argument("--inside", action="store_true", help="the server writes where its memory is at each sample")
    ap.add_argument("--trace", default="", help="--inside, and tracemalloc's allocation sites that grew in these: server,worker")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="rai-mem-"))
    redis_url, redis_proc = start_redis(redis_binary("7"), tmp)
    pg = fresh_pg() if args.pg else None
    db_url = next(pg) if pg else None
    extra: dict[str, str] = {}
    trace = None
    if args.inside or args.trace:
        trace = tmp / "inside"
        trace.mkdir()
        (tmp / "site").mkdir()
        (tmp / "site" / "sitecustomize.py").write_text(SITECUSTOMIZE)
        extra = {
            "PYTHONPATH": os.pathsep.join([str(tmp / "site"), os.environ.get("PYTHONPATH", "")]),
            "RAI_BENCH_TRACE_DIR": str(trace),
            "RAI_BENCH_TRACEMALLOC": args.trace,
            "RAI_BENCH_POOL_EVERY": str(args.every),
        }
    svc = start_service(tmp / "svc", redis_url, db_url, "process", slots=2, extra_env=extra)
    try:
        os.environ.update({"RAI_PROFILE": str(svc.profile), "RAI_SERVER": svc.url})
        proj = make_project(tmp / "p", ["echo hi"])
        for _ in range(20):  # warm the pools (connections, threads) before the first figure
            submit_one(proj)
        rows: list[tuple[int, float, dict[str, tuple[int, int]]]] = [(0, 0.0, sample(svc, trace))]
        started = time.monotonic()
        for i in range(1, args.n + 1):
            submit_one(proj)
            if i % args.every == 0 or i == args.n:
                rows.append((i, time.monotonic() - started, sample(svc, trace)))
                figures = "  ".join(f"{k} {r / 1024:.1f} MB/{fd} fd" for k, (r, fd) in rows[-1][2].items())
                print(f"{i:>6} jobs {rows[-1][1]:>6.0f} s  {figures}", flush=True)
        print(report(rows))
        if trace is not None:
            print(f"the server's own figures: {trace}")
    finally:
        svc.shutdown()
        redis_proc.terminate()
        if pg is not None:
            next(pg, None)
        if trace is None:
            shutil.rmtree(tmp, ignore_errors=True)


def report(rows: list[tuple[int, float, dict[str, tuple[int, int]]]]) -> str:
    """Per process: RSS and descriptors at the first, middle and last samples; KB/job over the
    second half (the warm-up's pools and caches are full by then) and over the whole run."""
    first, last = rows[0], rows[-1]
    mid = min(rows, key=lambda r: abs(r[0] - last[0] / 2))
    out = []
    for key in first[2]:
        if key not in last[2]:
            continue  # a pool process replaced meanwhile
        (r0, f0), (rm, _), (r1, f1) = first[2][key], mid[2].get(key, first[2][key]), last[2][key]
        half = (r1 - rm) * 1024 / 1000 / max(last[0] - mid[0], 1)
        whole = (r1 - r0) * 1024 / 1000 / max(last[0], 1)
        out.append(
            f"{key}: RSS {r0 / 1024:.1f} -> {rm / 1024:.1f} -> {r1 / 1024:.1f} MB (x{r1 / max(r0, 1):.2f}), "
            f"{whole:+.2f} KB/job overall, {half:+.2f} KB/job over jobs {mid[0]}-{last[0]}; descriptors {f0} -> {f1}"
        )
    return "\n".join(out)


if __name__ == "__main__":
    main()
