"""A whole term in a fresh database (issue 52): 400 students in 100 teams, 6 kinds with deadlines,
late days, extensions and grade rules, ~250,000 finished jobs with results and timelines, ranked
runs of the final (measured by the service, a few re-measured), regrade requests, a similarity
report, a few hosts with their slots full and jobs waiting. Written through the service's own
tables (the schema is made by its migrations, as a server makes it at start) with COPY, and into
its storage layout: each team's latest final as a real archive (a similarity report can read it),
and the stored logs of a sample of jobs at realistic sizes (every job's with ``--logs all``).

    .venv/bin/python bench/term_seed.py --jobs 250000 --db postgresql://postgres@127.0.0.1:5432/rai_term \\
        [--data DIR] [--logs 5000] [--seed 52]

The database must exist and be empty; ``--create`` makes it first. Prints what it wrote and how
long it took, and the database's size. Seeded users' keys are ``ak-NAME`` / ``sk-NAME`` (a bench's
database only): the bench logs in as ``admin`` and as student ``s0001``.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import math
import random
import tarfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import psycopg
from ulid import ULID

from raiserver.access.auth import hash_secret
from raiserver.store.db import Database, migrate
from raiserver.store.storage import Storage

KINDS = ["dev", "m1", "m2", "m3", "m4", "final"]
# share of a term's jobs per kind: most runs are students trying things out
KIND_SHARE = {"dev": 0.55, "m1": 0.07, "m2": 0.08, "m3": 0.09, "m4": 0.09, "final": 0.12}
DUE_DAY = {"m1": 21, "m2": 42, "m3": 63, "m4": 84, "final": 100}  # days into the term
TERM_DAYS = 105  # the term ends (now) five days after the final's deadline
GRADING: dict[str, dict[str, Any]] = {
    "m1": {"rule": "pass", "points": 100.0},
    "m2": {"rule": "linear", "points": 100.0, "slow": 0.5, "fast": 0.05},
    "m3": {"rule": "stddev", "points": 100.0, "at_median": 0.8, "per_sd": 0.1},
    "m4": {"rule": "linear", "points": 100.0, "slow": 0.3, "fast": 0.02, "late_penalty": 0.1},
    "final": {"rule": "stddev", "points": 100.0, "at_median": 0.8, "per_sd": 0.1},
}
STATES = [("succeeded", 0.70), ("failed", 0.22), ("timed_out", 0.03), ("cancelled", 0.05)]
SPEC = (
    "rai:\n  version: 0.2\n  image: rai/cuda:12.4-ece408\nresources:\n  gpu:\n    count: 1\n"
    "commands:\n  build:\n    - /bin/sh -c 'cp -rv /src/* /build/'\n    - cmake /build && make -j4\n"
    "    - ./m{n} 100\n    - ./m{n} 10000\n"
)
STUDENT_FILE = "new-forward.cu"
CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
JOB_COLUMNS = [
    "id",
    "owner_id",
    "queue",
    "kind",
    "state",
    "image",
    "spec_yaml",
    "archive_sha256",
    "archive_bytes",
    "gpu_count",
    "created_at",
    "started_at",
    "finished_at",
    "worker",
    "attempt",
    "exit_code",
    "failed_command",
    "message",
    "cancel_requested",
    "has_build",
    "build_bytes",
    "archive_kept",
    "results",
    "gpu_name",
    "released_at",
    "lease_at",
    "remeasure_of",
    "repeats",
    "phases",
    "waiting",
    "course_build_id",
    "late_days",
    "reserved",
    "submit_key",
]


@dataclass
class Term:
    """What was seeded, for the bench and the test: who to log in as, which ids to look at."""

    jobs: int = 0
    students: int = 0
    teams: int = 0
    logs: int = 0
    log_bytes: int = 0
    archives: int = 0
    seconds: float = 0.0
    db_bytes: int = 0
    jobs_bytes: int = 0
    sample_job: str = ""  # a finished job of s0001's
    sample_logged: str = ""  # a job of s0001's with a stored log
    report_id: int = 0
    counts: dict[str, int] = field(default_factory=dict)


def dsn_of(url: str) -> str:
    """A libpq address from the service's SQLAlchemy URL (postgresql+psycopg://…) or a plain one."""
    return url.replace("postgresql+psycopg://", "postgresql://")


def job_id(at: datetime, rng: random.Random) -> str:
    """A ULID for ``at``, as the server makes them (ids sort by submission)."""
    ms = int(at.timestamp() * 1000)
    head = "".join(CROCKFORD[(ms >> (5 * i)) & 31] for i in reversed(range(10)))
    return head + "".join(rng.choice(CROCKFORD) for _ in range(16))


def _iso(t: datetime) -> str:
    return t.isoformat()


def when_submitted(kind: str, start: datetime, rng: random.Random) -> datetime:
    """Dev runs all term; a milestone's runs crowd its last days (half of them in the last two)."""
    if kind == "dev":
        day = rng.uniform(0, TERM_DAYS - 0.01)
    else:
        due = DUE_DAY[kind]
        day = due - min(rng.expovariate(1 / 2.5), 20.0) + (rng.expovariate(1.5) if rng.random() < 0.03 else 0.0)
        day = min(max(day, 0.0), TERM_DAYS - 0.01)
    return start + timedelta(days=day)


def results_of(kind: str, state: str, rng: random.Random, ranked: bool) -> dict[str, Any] | None:
    """A run's results as the server keeps them (``JobResultSummary``): op times and correctness,
    and for a ranked run what the service measured."""
    if state not in ("succeeded", "failed"):
        return None
    op = rng.lognormvariate(math.log(0.08), 0.6)
    acc = 0.7 + 0.3 * rng.random() if state == "succeeded" else 0.3 * rng.random()
    kernels = [{"name": f"conv_forward_kernel_{i}", "ms": op * 1000 * w} for i, w in enumerate((0.6, 0.4))]
    r: dict[str, Any] = {
        "kernels": kernels,
        "op_times": [op * 0.6, op * 0.4],
        "op_time_total": op,
        "op_time_runs": [],
        "op_time_spread": None,
        "correctness": {"100": round(acc, 4), "10000": round(min(1.0, acc + 0.01), 4)},
        "elapsed_seconds": round(rng.uniform(5, 90), 2),
        "max_rss_kb": rng.randint(200_000, 900_000),
        "measured": None,
        "gpu_shared_with": 0,
    }
    if ranked:
        runs = sorted(op * rng.uniform(0.97, 1.03) for _ in range(5))
        r["measured"] = {
            "course_version": 1,
            "measure": "op",
            "op_time": runs[2],
            "runs": runs,
            "spread": runs[-1] - runs[0],
            "cv": 0.01,
            "accuracy": 1.0 if state == "succeeded" and acc > 0.75 else 0.0,
            "error": 1e-6,
            "reference_time": 0.05,
            "kernels": kernels,
            "printed_op_time": op,
            "flags": [],
            "problem": None if state == "succeeded" else "the program failed",
            "cpu_seconds": [1.0] * 5,
            "ci": runs[2] * 0.005,
        }
    return r


def phases_of(created: datetime, started: datetime, rng: random.Random) -> list[dict[str, Any]]:
    """The timeline a worker notes: claimed, container started, each command, first line, build uploaded."""
    t = started
    out = [{"name": "claimed", "at": _iso(started - timedelta(seconds=0.2)), "detail": "gpu-07"}]
    out.append({"name": "container started", "at": _iso(t), "detail": "rai/cuda:12.4-ece408"})
    for cmd in ("/bin/sh -c 'cp -rv /src/* /build/'", "cmake /build && make -j4", "./m 100", "./m 10000"):
        t += timedelta(seconds=rng.uniform(0.5, 8))
        out.append({"name": "command started", "at": _iso(t), "detail": cmd})
    return out


def log_lines(n: int, rng: random.Random) -> list[str]:
    """What a CUDA project's build and run print: compiler lines, progress, the op times."""
    lines = []
    for i in range(n):
        r = rng.random()
        if r < 0.5:
            lines.append(f"[{i * 100 // max(n, 1):3d}%] Building CUDA object CMakeFiles/m.dir/src/layer/custom/new-forward.cu.o")
        elif r < 0.8:
            lines.append(f"Test batch size: {rng.choice((100, 1000, 10000))}  Loading fashion-mnist data...Done  Loading model...Done")
        else:
            lines.append(f"Op Time: {rng.uniform(1, 200):.3f} ms  Conv-GPU==  Layer Time: {rng.uniform(1, 300):.3f} ms")
    return lines


def write_log(storage: Storage, jid: str, started: datetime, rng: random.Random) -> int:
    """A stored log as ``LogStore.archive`` writes it: JSON lines of batches (lognormal size, median ~12 KiB)."""
    n = max(5, int(rng.lognormvariate(math.log(150), 1.0)))
    lines, t, out, number = log_lines(n, rng), started.timestamp(), [], 1
    for i in range(0, len(lines), 40):
        chunk = lines[i : i + 40]
        out.append(json.dumps({"n": number, "t": t + i * 0.01, "s": "out", "c": len(chunk), "x": "\n".join(chunk)}))
        number += len(chunk)
    text = "\n".join(out) + "\n"
    storage.log_path(jid).write_text(text)
    return len(text)


def team_archive(storage: Storage, team: int, rng: random.Random) -> tuple[str, int]:
    """A team's project as a stored archive (content-addressed), its student file a kernel of its own."""
    body = "\n".join(
        f"__global__ void k{team}_{i}(float *y, const float *x, int n) {{ int t = blockIdx.x * blockDim.x + threadIdx.x;"
        f" if (t < n) y[t] = x[t] * {rng.random():.4f}f + {i}; }}"
        for i in range(rng.randint(20, 60))
    )
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in ((STUDENT_FILE, body), ("rai_build.yml", SPEC.format(n=4))):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    data = buf.getvalue()
    sha = hashlib.sha256(data).hexdigest()
    path = storage.archive_path(sha)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return sha, len(data)


class Seeder:
    """One term's rows, made in memory in order and written with COPY."""

    def __init__(self, url: str, storage: Storage, jobs: int, students: int, teams: int, logs: int | None, seed: int):
        self.url, self.storage = url, storage
        self.n_jobs, self.n_students, self.n_teams, self.n_logs = jobs, students, teams, logs
        self.rng = random.Random(seed)
        self.now = datetime.now(timezone.utc).replace(microsecond=0)
        self.start = self.now - timedelta(days=TERM_DAYS)
        self.term = Term(students=students, teams=teams)

    def users(self) -> list[tuple[Any, ...]]:
        rows: list[tuple[Any, ...]] = []
        staff = [("admin", "admin"), ("prof", "instructor"), *((f"ta{i}", "ta") for i in range(1, 7))]
        for i, (name, role) in enumerate(staff, start=1):
            rows.append((i, name, role, name.title(), "Staff", f"{name}@example.edu", None, f"ak-{name}", hash_secret(f"sk-{name}")))
        for s in range(1, self.n_students + 1):
            name = f"s{s:04d}"
            team = f"team-{(s - 1) % self.n_teams + 1:03d}"
            rows.append(
                (
                    len(rows) + 1,
                    name,
                    "student",
                    f"First{s}",
                    f"Last{s}",
                    f"{name}@example.edu",
                    team,
                    f"ak-{name}",
                    hash_secret(f"sk-{name}"),
                )
            )
        return rows

    def run(self) -> Term:
        t0 = time.monotonic()
        database = Database(self.url if "+psycopg" in self.url else self.url.replace("postgresql://", "postgresql+psycopg://"))
        migrate(database.engine)  # the schema as the server makes it at start: alembic upgrade head
        database.engine.dispose()
        users = self.users()
        students = [u for u in users if u[2] == "student"]
        with psycopg.connect(dsn_of(self.url)) as conn, conn.cursor() as cur:
            with cur.copy(
                "COPY users (id, username, role, firstname, lastname, email, team, access_key, secret_hash, active, created_at) FROM STDIN"
            ) as cp:
                for u in users:
                    cp.write_row((*u, True, self.start))
            cur.execute("SELECT setval('users_id_seq', (SELECT max(id) FROM users))")
            self.kinds(cur)
            cur.execute(
                "INSERT INTO course_builds (id, kind, version, spec_yaml, labels, installed_by, installed_at) VALUES "
                "(1, 'final', 1, %s, %s, 'prof', %s), (2, 'final', 2, %s, %s, 'prof', %s)",
                (SPEC.format(n=4), "1\n2\n3\n", self.start, SPEC.format(n=4), "1\n2\n3\n", self.start + timedelta(days=90)),
            )
            cur.execute("SELECT setval('course_builds_id_seq', 2)")
            self.extensions(cur, students)
            jobs = self.jobs(cur, students)
            self.regrades(cur, jobs, students)
            self.fleet(cur, students)
            self.similarity(cur)
            self.audit(cur)
            conn.commit()
        with psycopg.connect(dsn_of(self.url), autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE")  # as autovacuum would have done over a term: planner statistics
            self.term.db_bytes = int(conn.execute("SELECT pg_database_size(current_database())").fetchone()[0])  # type: ignore[index]
            self.term.jobs_bytes = int(conn.execute("SELECT pg_total_relation_size('jobs')").fetchone()[0])  # type: ignore[index]
        self.term.seconds = time.monotonic() - t0
        return self.term

    def kinds(self, cur: psycopg.Cursor) -> None:
        cur.execute("DELETE FROM kinds")  # the migration seeded RAI_KINDS' names: the term's own replace them
        for name in KINDS:
            due = self.start + timedelta(days=DUE_DAY[name]) if name in DUE_DAY else None
            policy = "mark" if name == "final" else ("days" if due else "refuse")
            grading = json.dumps(GRADING[name]) if name in GRADING else None
            cur.execute(
                "INSERT INTO kinds (name, opens_at, due_at, late_policy, late_hours, grading) VALUES (%s, %s, %s, %s, %s, %s)",
                (name, self.start, due, policy, 72.0 if due else None, grading),
            )

    def extensions(self, cur: psycopg.Cursor, students: list[tuple[Any, ...]]) -> None:
        with cur.copy("COPY extensions (kind, username, team, due_at, reason, granted_by, granted_at) FROM STDIN") as cp:
            for i, s in enumerate(self.rng.sample(students, 30)):
                kind = KINDS[1 + i % 5]
                due = self.start + timedelta(days=DUE_DAY[kind] + self.rng.randint(1, 4))
                cp.write_row((kind, s[1], None, due, "illness", "prof", due - timedelta(days=3)))
            for t in range(1, 6):
                cp.write_row(("m3", None, f"team-{t:03d}", self.start + timedelta(days=DUE_DAY["m3"] + 2), "outage", "prof", self.start))

    def jobs(self, cur: psycopg.Cursor, students: list[tuple[Any, ...]]) -> list[tuple[str, int, str]]:
        """Every finished job of the term, oldest first; returns (id, owner, kind) of the graded ones."""
        rng = self.rng
        kinds, weights = list(KIND_SHARE), list(KIND_SHARE.values())
        # some students submit far more than others (a lognormal share of the term's jobs)
        activity = [rng.lognormvariate(0, 0.7) for _ in students]
        planned = sorted(((when_submitted(k, self.start, rng), k) for k in rng.choices(kinds, weights, k=self.n_jobs)), key=lambda p: p[0])
        owners = rng.choices(students, activity, k=self.n_jobs)
        owners[-1] = students[0]  # s0001's latest job is finished: the bench's job page
        team_sha = {t: team_archive(self.storage, t, rng) for t in range(1, self.n_teams + 1)}
        self.term.archives = len(team_sha)
        sample = set(rng.sample(range(self.n_jobs), min(self.n_logs, self.n_jobs))) if self.n_logs is not None else None
        graded: list[tuple[str, int, str]] = []
        counts: dict[str, int] = {}
        ids: list[str] = []
        with cur.copy(f"COPY jobs ({', '.join(JOB_COLUMNS)}) FROM STDIN") as cp:
            for i, ((created, kind), owner) in enumerate(zip(planned, owners, strict=True)):
                row = self.job_row(i, created, kind, owner, team_sha, sample)
                cp.write_row(row)
                ids.append(row[0])
                counts[row[4]] = counts.get(row[4], 0) + 1
                if kind != "dev" and row[4] == "succeeded":
                    graded.append((row[0], owner[0], kind))
                if owner[1] == "s0001":
                    self.term.sample_job = row[0]
                    if sample is None or i in sample:
                        self.term.sample_logged = row[0]
        # a few finals measured again by staff (issue 32): the new run's result stands
        finals = [g for g in graded if g[2] == "final"]
        for original, _owner, _ in rng.sample(finals, min(20, len(finals))):
            cur.execute(
                "INSERT INTO jobs ("
                + ", ".join(JOB_COLUMNS)
                + ") SELECT "
                + ", ".join("%s" if c in ("id", "remeasure_of", "repeats", "created_at", "submit_key") else c for c in JOB_COLUMNS)
                + " FROM jobs WHERE id = %s",
                (job_id(self.now - timedelta(days=4), rng), self.now - timedelta(days=4), original, 10, None, original),
            )
            counts["succeeded"] += 1
        self.term.jobs = sum(counts.values())
        self.term.counts = counts
        return graded

    def job_row(
        self, i: int, created: datetime, kind: str, owner: tuple[Any, ...], team_sha: dict[int, tuple[str, int]], sample: set[int] | None
    ) -> tuple[Any, ...]:
        rng = self.rng
        state = rng.choices([s for s, _ in STATES], [w for _, w in STATES])[0]
        ranked = kind == "final"
        jid = job_id(created, rng)
        released = created + timedelta(seconds=rng.expovariate(1 / 20))
        started = released + timedelta(seconds=rng.uniform(0.2, 2))
        ran = rng.lognormvariate(math.log(40), 0.7)
        finished = started + timedelta(seconds=min(ran, 600))
        team = int(owner[6].split("-")[1]) if owner[6] else 1
        sha, size = team_sha[team] if ranked else (f"{rng.getrandbits(256):064x}", int(rng.lognormvariate(math.log(200_000), 1.0)))
        due = self.start + timedelta(days=DUE_DAY[kind]) if kind in DUE_DAY else None
        late_days = math.ceil((created - due) / timedelta(days=1)) if due and created > due and kind != "final" else 0
        if late_days and rng.random() < 0.3:
            late_days = 0  # within the days an earlier late submission drew
        logged = sample is None or i in sample
        if logged and state != "cancelled":
            n = write_log(self.storage, jid, started, rng)
            self.term.logs += 1
            self.term.log_bytes += n
        results = results_of(kind, state, rng, ranked)
        return (
            jid,
            owner[0],
            "gpu",
            kind,
            state,
            "rai/cuda:12.4-ece408",
            SPEC.format(n=kind[-1] if kind[-1].isdigit() else 4),
            sha,
            size,
            1,
            created,
            started if state != "cancelled" else None,
            finished,
            f"gpu-{rng.randint(1, 10):02d}",
            1,
            {"succeeded": 0, "failed": 1, "timed_out": 124, "cancelled": None}[state],
            "./m 10000" if state == "failed" else None,
            "cancelled by its owner" if state == "cancelled" else None,
            False,
            state in ("succeeded", "failed"),
            int(rng.lognormvariate(math.log(2_000_000), 0.8)) if state in ("succeeded", "failed") else 0,
            True,
            json.dumps(results) if results is not None else None,
            "NVIDIA H100 80GB HBM3",
            released,
            finished if state != "cancelled" else None,
            None,
            5 if ranked else None,
            json.dumps(phases_of(created, started, rng)) if state != "cancelled" else None,
            None,
            (1 if created < self.start + timedelta(days=90) else 2) if ranked else None,
            late_days,
            ranked,
            str(ULID()) if rng.random() < 0.5 else None,
        )

    def regrades(self, cur: psycopg.Cursor, graded: list[tuple[str, int, str]], students: list[tuple[Any, ...]]) -> None:
        """300 requests over the term, the last 40 still open."""
        picked = self.rng.sample(graded, min(300, len(graded)))
        with cur.copy(
            "COPY regrade_requests (job_id, student_id, message, created_at, state, outcome, answer, closed_by, closed_at) FROM STDIN"
        ) as cp:
            for i, (jid, owner, _) in enumerate(picked):
                at = self.start + timedelta(days=self.rng.uniform(20, TERM_DAYS - 0.1))
                closed = i < len(picked) - 40
                cp.write_row(
                    (
                        jid,
                        owner,
                        "My kernel passed locally; please look at the timing again. " * 3,
                        at,
                        "closed" if closed else "open",
                        "answered" if closed else None,
                        "Looked again: the grade stands." if closed else None,
                        "ta1" if closed else None,
                        at + timedelta(hours=20) if closed else None,
                    )
                )

    def fleet(self, cur: psycopg.Cursor, students: list[tuple[Any, ...]]) -> None:
        """10 hosts of 2 slots, every slot busy (nothing is released while the bench runs), and 40 jobs waiting."""
        rng = self.rng
        with cur.copy(
            "COPY workers (name, queues, executor, slots, busy, gpus, running, version, first_seen, last_seen, jobs_done) FROM STDIN"
        ) as cp:
            for w in range(1, 11):
                cp.write_row((f"gpu-{w:02d}", '["gpu"]', "docker", 2, 2, "[]", "[]", "bench", self.start, self.now, 0))
        with cur.copy(f"COPY jobs ({', '.join(JOB_COLUMNS)}) FROM STDIN") as cp:
            for i in range(60):
                owner = students[0] if i in (20, 45) else rng.choice(students)
                created = self.now - timedelta(seconds=600 - i * 5)
                running = i < 20
                started = created + timedelta(seconds=3) if running else None
                row = [None] * len(JOB_COLUMNS)
                values = {
                    "id": job_id(created, rng), "owner_id": owner[0], "queue": "gpu", "kind": "m4" if i % 3 else "dev",
                    "state": "running" if running else "queued", "image": "rai/cuda:12.4-ece408", "spec_yaml": SPEC.format(n=4),
                    "archive_sha256": "0" * 64, "archive_bytes": 100_000, "gpu_count": 1, "created_at": created, "started_at": started,
                    "worker": f"gpu-{i // 2 + 1:02d}" if running else None, "attempt": 1, "cancel_requested": False, "has_build": False,
                    "build_bytes": 0, "archive_kept": True, "released_at": created + timedelta(seconds=1) if running else None,
                    "lease_at": self.now if running else None, "late_days": 0, "reserved": False,
                }  # fmt: skip
                for k, v in values.items():
                    row[JOB_COLUMNS.index(k)] = v
                cp.write_row(row)
        self.term.jobs += 60

    def similarity(self, cur: psycopg.Cursor) -> None:
        """A finished report over the final, its 50 pairs kept as the page shows them."""
        teams = [f"team-{t:03d}" for t in range(1, self.n_teams + 1)]
        pairs = [
            {
                "a": teams[i % len(teams)], "b": teams[-1 - i % len(teams)], "a_job": "A" * 26, "b_job": "B" * 26, "score": 0.9 - i / 100,
                "share_a": 0.8, "share_b": 0.7, "tokens": 400, "slices_a": [[0], [100]], "slices_b": [[0], [100]],
            }
            for i in range(50)
        ]  # fmt: skip
        cur.execute(
            "INSERT INTO similarity_reports (kind, state, started_by, created_at, started_at, finished_at, phase, done, total, teams,"
            " message, starter, files, pairs, code) VALUES ('final', 'done', 'prof', %s, %s, %s, 'comparing', 4950, 4950, 100,"
            " '100 teams compared', '', %s, %s, %s) RETURNING id",
            (
                self.now,
                self.now,
                self.now,
                json.dumps([STUDENT_FILE]),
                json.dumps(pairs),
                json.dumps({"A" * 26: {"team": "t", "code": ""}}),
            ),
        )
        self.term.report_id = int(cur.fetchone()[0])  # type: ignore[index]

    def audit(self, cur: psycopg.Cursor) -> None:
        with cur.copy("COPY audit_log (at, actor, action, target, detail) FROM STDIN") as cp:
            for i in range(2000):
                cp.write_row((self.start + timedelta(hours=i), "prof", "kind.change", KINDS[i % 6], json.dumps({"via": "cli"})))


def create_database(url: str) -> None:
    base, name = dsn_of(url).rsplit("/", 1)
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')


def drop_database(url: str) -> None:
    base, name = dsn_of(url).rsplit("/", 1)
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def seed(url: str, data: Path, jobs: int, students: int = 400, teams: int = 100, logs: int | None = 5000, seed: int = 52) -> Term:
    """Fill the (empty) database at ``url`` and the storage under ``data`` with a term."""
    return Seeder(url, Storage(data), jobs, students, teams, logs, seed).run()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=250_000)
    ap.add_argument("--db", required=True, help="postgresql://user@host:port/name (empty; --create makes it)")
    ap.add_argument("--data", type=Path, default=Path(".rai-term"), help="the storage folder (RAI_DATA_DIR/storage)")
    ap.add_argument("--students", type=int, default=400)
    ap.add_argument("--teams", type=int, default=100)
    ap.add_argument("--logs", default="5000", help="stored logs written: a number of jobs (a sample), or 'all'")
    ap.add_argument("--seed", type=int, default=52)
    ap.add_argument("--create", action="store_true", help="CREATE DATABASE first")
    a = ap.parse_args()
    if a.create:
        create_database(a.db)
    term = seed(a.db, a.data, a.jobs, a.students, a.teams, None if a.logs == "all" else int(a.logs), a.seed)
    print(report(term))


def report(term: Term) -> str:
    mean_log = term.log_bytes / term.logs if term.logs else 0
    return (
        f"seeded {term.jobs:,} jobs ({', '.join(f'{k} {v:,}' for k, v in sorted(term.counts.items()))}), "
        f"{term.students} students in {term.teams} teams, in {term.seconds:.1f} s\n"
        f"database {term.db_bytes / 1024**2:,.0f} MiB (jobs table with its indexes {term.jobs_bytes / 1024**2:,.0f} MiB, "
        f"{term.jobs_bytes / max(term.jobs, 1):,.0f} bytes a job)\n"
        f"stored logs: {term.logs:,} written, {term.log_bytes / 1024**2:,.1f} MiB, mean {mean_log / 1024:,.1f} KiB "
        f"(all {term.jobs:,} jobs': ~{mean_log * term.jobs / 1024**3:,.1f} GiB); {term.archives} team archives"
    )


if __name__ == "__main__":
    main()
