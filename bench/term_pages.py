"""Every web page and CLI listing at term scale (issue 52): a server started on a seeded term
(``term_seed.py``), each page asked ``--rounds`` times in turn, p50/p95/max printed; the grades
export of every student for each graded kind; and what each page costs the database, measured in
the same run: the statements it sends and the buffers (8 KiB pages) they touch, from EXPLAIN
(ANALYZE, BUFFERS) of each statement it sent. A page whose buffers grow with the table reads the
table, whatever its time on this machine; ``tests/test_term_scale.py`` compares them at two sizes.

    .venv/bin/python bench/term_pages.py --jobs 250000          # seed a fresh database, measure, drop it
    .venv/bin/python bench/term_pages.py --db postgresql://postgres@127.0.0.1:5432/rai_term --data DIR

Targets (issue 52, on this 2-core machine): every page and listing p95 < 200 ms at 250,000 jobs;
the grades export of 400 students < 5 s.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
import term_seed  # noqa: E402 - the seeder beside this file

from raiserver.ops import launch  # noqa: E402

PG_BASE = os.environ.get("RAI_TEST_PG", "postgresql://postgres@127.0.0.1:5432").replace("postgresql+psycopg://", "postgresql://")
TARGET_MS = 200.0
EXPORT_TARGET_S = 5.0
METRICS_TOKEN = "term-bench-metrics"


@dataclass(frozen=True)
class Page:
    name: str
    path: str
    who: str  # anon | student | admin | web-student | web-admin (a browser's session)
    export: bool = False  # a grade sheet: its own target


def pages(t: dict[str, Any]) -> list[Page]:
    """The pages a term's users open, and the API calls behind each CLI listing."""
    job, logged, report = t["job"], t["logged"], t["report"]
    return [
        Page("healthz", "/healthz", "anon"),
        Page("metrics", "/metrics", "anon"),
        Page("queue (CLI)", "/api/v1/queue", "student"),
        Page("queue page", "/queue", "web-admin"),
        Page("history (CLI)", "/api/v1/jobs?limit=20", "student"),
        Page("jobs, all (staff)", "/api/v1/jobs?all=true&limit=100", "admin"),
        Page("status (CLI)", f"/api/v1/jobs/{job}", "student"),
        Page("job page", f"/jobs/{job}", "web-student"),
        Page("stored log", f"/api/v1/jobs/{logged}/log.txt", "student"),
        Page("user page", "/users/s0001", "web-admin"),
        Page("users page", "/users?q=s000", "web-admin"),
        Page("leaderboard (CLI)", "/api/v1/leaderboard", "student"),
        Page("leaderboard page", "/leaderboard", "web-student"),
        Page("kinds (CLI)", "/api/v1/kinds", "student"),
        Page("limits (CLI)", "/api/v1/limits", "student"),
        Page("deadlines page", "/kinds", "web-admin"),
        Page("regrades (CLI)", "/api/v1/regrades", "student"),
        Page("regrades, staff", "/api/v1/admin/regrades", "admin"),
        Page("regrades page", "/regrades?everything=true", "web-admin"),
        Page("similarity (CLI)", "/api/v1/admin/similarity", "admin"),
        Page("similarity page", "/similarity", "web-admin"),
        Page("similarity report", f"/similarity/{report}", "web-admin"),
        Page("workers page", "/workers", "web-admin"),
        Page("quarantine", "/api/v1/leaderboard/quarantine", "admin"),
        Page("audit (CLI)", "/api/v1/admin/audit", "admin"),
        *(Page(f"grades {k}", f"/api/v1/admin/grades/{k}", "admin", export=True) for k in ("m1", "m3", "final")),
        Page("grades final, Canvas", "/api/v1/admin/grades/final?format=canvas", "admin", export=True),
    ]


def targets(url: str, storage: Path) -> dict[str, Any]:
    """The ids the pages look at: s0001's latest finished job, one of theirs with a stored log, the latest report."""
    with psycopg.connect(term_seed.dsn_of(url)) as conn:
        mine = [
            r[0]
            for r in conn.execute(
                "SELECT j.id FROM jobs j JOIN users u ON u.id = j.owner_id WHERE u.username = 's0001' "
                "AND j.state NOT IN ('queued', 'running') ORDER BY j.created_at DESC"
            )
        ]
        report = conn.execute("SELECT max(id) FROM similarity_reports").fetchone()
    logged = next((j for j in mine if (storage / "logs" / f"{j}.jsonl").exists()), mine[0])
    return {"job": mine[0], "logged": logged, "report": report[0] if report else 1}


def web_login(c: httpx.Client, name: str) -> httpx.Client:
    html = c.get("/login").text
    csrf = re.search(r'name="csrf" value="([^"]+)"', html)
    assert csrf is not None, "no CSRF token on /login"
    r = c.post("/login", data={"access_key": f"ak-{name}", "secret_key": f"sk-{name}", "csrf": csrf.group(1)}, follow_redirects=False)
    assert r.status_code == 303, f"login as {name}: {r.status_code}"
    return c


def basic(name: str) -> str:
    """The seeded user's keys as HTTP basic auth (what the client sends)."""
    return "Basic " + base64.b64encode(f"ak-{name}:sk-{name}".encode()).decode()


def clients(make: Callable[..., httpx.Client]) -> dict[str, httpx.Client]:
    """One client per kind of caller; ``make(**kwargs)`` makes an httpx client (or a TestClient)."""
    return {
        "anon": make(headers={"Authorization": f"Bearer {METRICS_TOKEN}"}),
        "student": make(headers={"Authorization": basic("s0001")}),
        "admin": make(headers={"Authorization": basic("admin")}),
        "web-student": web_login(make(), "s0001"),
        "web-admin": web_login(make(), "admin"),
    }


FAILED: dict[str, str] = {}  # page -> what it answered instead of 200 (said in the table; the run goes on)


def ask(c: httpx.Client, page: Page) -> float:
    t0 = time.perf_counter()
    r = c.get(page.path, headers={"Accept": "text/html"} if page.who.startswith("web") else None)
    took = time.perf_counter() - t0
    if r.status_code != 200:
        FAILED[page.name] = f"{r.status_code} {r.text[:80]!r}"
    return took


FIRST: dict[str, float] = {}  # page -> its first answer's time (a process's first look: statements compiled, boards and sheets made)


def timings(cs: dict[str, httpx.Client], ps: list[Page], rounds: int) -> dict[str, list[float]]:
    """Each page ``rounds`` times, the pages in turn (a class's mix, not one page's cache warmed alone),
    after a first pass whose times are kept apart (``FIRST``)."""
    out: dict[str, list[float]] = {p.name: [] for p in ps}
    for p in ps:
        FIRST[p.name] = ask(cs[p.who], p)
    for _ in range(rounds):
        for p in ps:
            out[p.name].append(ask(cs[p.who], p))
    return out


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


@dataclass
class Cost:
    statements: int = 0
    buffers: int = 0  # shared buffers hit or read by the statements' plans
    rows: int = 0  # rows the statements returned to the server


@contextmanager
def costing(engine: Any, url: str) -> Iterator[Callable[[], Cost]]:
    """Note every statement the engine sends; ``take()`` explains those since the last call
    (EXPLAIN ANALYZE, BUFFERS, on a connection of its own, in a transaction rolled back) and sums them."""
    from sqlalchemy import event

    sent: list[tuple[str, Any, int]] = []

    def before(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        sent.append((statement, parameters, 0))

    def after(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        if sent:
            s, p, _ = sent[-1]
            sent[-1] = (s, p, max(cursor.rowcount, 0))

    event.listen(engine, "before_cursor_execute", before)
    event.listen(engine, "after_cursor_execute", after)
    explainer = psycopg.connect(term_seed.dsn_of(url))

    def take() -> Cost:
        cost = Cost()
        for statement, params, rows in sent:
            if not statement.lstrip().upper().startswith("SELECT"):
                continue
            cost.statements += 1
            cost.rows += rows
            with explainer.cursor() as cur:
                cur.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + statement, params)
                plan = cur.fetchone()[0][0]["Plan"]  # type: ignore[index]
            explainer.rollback()
            cost.buffers += int(plan.get("Shared Hit Blocks", 0)) + int(plan.get("Shared Read Blocks", 0))
        sent.clear()
        return cost

    try:
        yield take
    finally:
        event.remove(engine, "before_cursor_execute", before)
        event.remove(engine, "after_cursor_execute", after)
        explainer.close()


def app_settings(url: str, data: Path, redis_url: str) -> dict[str, str]:
    """The server's environment for a seeded term: its kinds, late days, hosts that never die mid-bench."""
    return {
        "DATABASE_URL": url if "+psycopg" in url else url.replace("postgresql://", "postgresql+psycopg://"),
        "RAI_DATA_DIR": str(data),
        "RAI_REDIS_URL": redis_url,
        "RAI_KINDS": ",".join(term_seed.KINDS),
        "RAI_LATE_DAYS": "5",
        "RAI_WORKER_DEAD_AFTER": "1000000",  # the seeded hosts' heartbeats are as old as the seed
        "RAI_METRICS_TOKEN": METRICS_TOKEN,
        "RAI_METRICS_PORT": "0",
        "RAI_WORKER_TOKEN": uuid.uuid4().hex,
        "RAI_LOGIN_FAILURES_PER_IP": "100000",
    }


def costs(url: str, data: Path, redis_url: str, ps: list[Page]) -> dict[str, Cost]:
    """Each page once, in this process (the app as the server makes it, no HTTP), costed."""
    from fastapi.testclient import TestClient

    from raiserver.app import create_app
    from raiserver.config import Settings

    env = app_settings(url, data, redis_url)
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        app = create_app(Settings())
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    engine = app.state.services.db.engine
    out: dict[str, Cost] = {}
    cs = clients(lambda **kw: TestClient(app, base_url="http://127.0.0.1", **kw))
    for p in ps:  # once first: the statements a process sends once (its first session) are not the page's
        ask(cs[p.who], p)
    with costing(engine, url) as take:
        take()
        for p in ps:
            ask(cs[p.who], p)
            out[p.name] = take()
    engine.dispose()
    return out


@contextmanager
def private_redis() -> Iterator[tuple[str, int]]:
    """A redis-server of the bench's own, in a temporary folder: its URL and its pid (the fleet
    simulator counts its CPU)."""
    port = launch.free_port()
    d = Path(tempfile.mkdtemp(prefix="rai-term-redis-"))
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(d)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        import redis

        r = redis.Redis(port=port)
        for _ in range(100):
            try:
                if r.ping():
                    break
            except redis.RedisError:
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0", proc.pid
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(d, ignore_errors=True)


SERVER_PID: list[int] = []
RSS: list[int] = []  # KiB, each server process's after the pages


def rss_kib(pid: int) -> int:
    try:
        return next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("VmRSS:"))
    except (OSError, StopIteration):
        return 0


def processes_of(pid: int) -> list[int]:
    """The server's process and, with several, uvicorn's worker processes (its children)."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        children = []
    return [pid, *(int(c) for c in children)]


@contextmanager
def server(url: str, data: Path, redis_url: str, processes: int) -> Iterator[str]:
    """The server on the seeded term, as the service starts it (``launch.start_server``)."""
    port = launch.free_port()
    env = {**os.environ, **app_settings(url, data, redis_url), "RAI_SERVER_URL": f"http://127.0.0.1:{port}", "PYTHONUNBUFFERED": "1"}
    part = launch.start_server(env, "127.0.0.1", port, data / "server.log", processes=processes, timeout=120)
    try:
        SERVER_PID[:] = [part.pid or 0]
        yield f"http://127.0.0.1:{port}"
    finally:
        part.stop()


def measure(
    url: str, data: Path, rounds: int, processes: int, settle: float = 0.0
) -> tuple[list[Page], dict[str, list[float]], dict[str, Cost]]:
    ps = pages(targets(url, data / "storage"))
    with private_redis() as (redis_url, _pid):
        with server(url, data, redis_url, processes) as base:
            time.sleep(settle)  # a process that has been up a while: its background pass has made the boards and sheets
            cs = clients(lambda **kw: httpx.Client(base_url=base, timeout=120, **kw))
            times = timings(cs, [p for p in ps if not p.export], rounds)
            times.update(timings(cs, [p for p in ps if p.export], max(3, rounds // 5)))
            RSS[:] = [rss_kib(pid) for pid in processes_of(SERVER_PID[0])]
        cost = costs(url, data, redis_url, ps)
    return ps, times, cost


def table(ps: list[Page], times: dict[str, list[float]], cost: dict[str, Cost]) -> str:
    lines = [
        f"{'page':24} {'first ms':>8} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8}  {'stmts':>5} {'buffers':>8} {'rows':>8}  target (p95)"
    ]
    for p in ps:
        t, c = times[p.name], cost[p.name]
        p95 = pct(t, 0.95) * 1000
        ok = (p95 < EXPORT_TARGET_S * 1000) if p.export else (p95 < TARGET_MS)
        aim = f"< {EXPORT_TARGET_S:g} s" if p.export else f"< {TARGET_MS:g} ms"
        lines.append(
            f"{p.name:24} {FIRST.get(p.name, 0.0) * 1000:8.1f} {statistics.median(t) * 1000:8.1f} {p95:8.1f} {max(t) * 1000:8.1f}  "
            f"{c.statements:5d} {c.buffers:8d} {c.rows:8d}  {aim} {'ok' if ok else 'MISSED'}"
            + (f"  FAILED: {FAILED[p.name]}" if p.name in FAILED else "")
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=250_000, help="seed a fresh database of this many jobs (without --db)")
    ap.add_argument("--db", help="an already seeded database (term_seed.py); kept")
    ap.add_argument("--data", type=Path, help="its RAI_DATA_DIR (storage/ under it)")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--settle", type=float, default=0.0, help="seconds between the server's start and the first look")
    ap.add_argument("--processes", type=int, default=1, help="server processes (uvicorn --workers)")
    ap.add_argument("--logs", type=int, default=5000, help="stored logs the seeder writes")
    ap.add_argument("--out", type=Path, help="also write the figures here")
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stopped: the server, Redis and a seeded database go too
    made = a.db is None
    url = a.db or f"{PG_BASE}/rai_term_{uuid.uuid4().hex[:8]}"
    data = a.data or Path(tempfile.mkdtemp(prefix="rai-term-"))
    head = []
    try:
        if made:
            term_seed.create_database(url)
            head.append(term_seed.report(term_seed.seed(url, data / "storage", a.jobs, logs=a.logs)))
        with psycopg.connect(term_seed.dsn_of(url)) as conn:
            n = conn.execute("SELECT count(*) FROM jobs").fetchone()[0]  # type: ignore[index]
            size = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]  # type: ignore[index]
        head.append(f"{n:,} jobs, database {size / 1024**2:,.0f} MiB; {a.processes} server process(es), {a.rounds} rounds of every page")
        ps, times, cost = measure(url, data, a.rounds, a.processes, a.settle)
        rss = ", ".join(f"{k / 1024:,.0f}" for k in RSS)
        text = "\n".join([*head, table(ps, times, cost), f"server RSS after the pages (MiB, each process): {rss}"])
        print(text)
        if a.out:
            a.out.write_text(text + "\n")
        print(json.dumps({p.name: round(pct(times[p.name], 0.95) * 1000, 1) for p in ps}), file=sys.stderr)
    finally:
        if made:
            term_seed.drop_database(url)
            shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
