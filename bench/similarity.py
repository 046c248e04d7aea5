"""How long the similarity report takes for a class (issue 36): N teams' new-forward.cu, each the
course's starter (examples/ece408-conv/new-forward.cu) changed as a student would (a kernel of its
own: tiling, unrolling, helpers, arithmetic of its own, renamed variables, comments), and P planted
copies (another team's file with every name changed, reformatted, a few lines added). The starter is
boilerplate. Prints the time of each phase and where the planted copies rank; then makes the same
report the way the server does (``similarityreport.make``: the teams' jobs and archives stored, each
archive read, progress noted in the database, the result kept) and prints how long that took.

    .venv/bin/python bench/similarity.py [--teams 300] [--copies 10] [--seed 1] [--db URL]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import random
import re
import tarfile
import tempfile
import time
from pathlib import Path

from ulid import ULID

from raiprotocol.models import JobState
from raiserver.access.auth import create_user
from raiserver.grading.similarity import Doc, compare
from raiserver.grading.similarityreport import make
from raiserver.store.db import Database, migrate
from raiserver.store.storage import Storage
from raiserver.store.tables import Job, SimilarityReport

STARTER = Path(__file__).resolve().parent.parent / "examples" / "ece408-conv" / "new-forward.cu"
NAMES = ["acc", "sum", "val", "out", "tmp", "res", "partial", "total", "r", "s", "v", "cur", "a0", "a1", "t0", "t1"]
OPS = ["+", "-", "*"]


def expr(rng: random.Random, names: list[str], depth: int = 0) -> str:
    if depth > 2 or rng.random() < 0.3:
        return rng.choice([*names, f"{rng.randint(1, 9)}.{rng.randint(0, 99)}f", "x[i]", "k[j]"])
    return f"({expr(rng, names, depth + 1)} {rng.choice(OPS)} {expr(rng, names, depth + 1)})"


def kernel(rng: random.Random, team: int) -> str:
    """A kernel of the team's own: its structure and arithmetic drawn at random."""
    tile = rng.choice([8, 16, 32])
    names = rng.sample(NAMES, 6)
    lines = [
        f"#define TILE_{team} {tile}",
        f"__global__ void conv_team_{team}(const float *x, const float *k, float *y, int n) {{",
        f"  __shared__ float tile[{tile}][{tile}];" if rng.random() < 0.6 else "  // no shared memory",
        "  int i = blockIdx.x * blockDim.x + threadIdx.x;",
        "  int j = threadIdx.y;",
    ]
    for name in names[:3]:
        lines.append(f"  float {name} = {expr(rng, ['0.0f', 'x[i]'])};")
    for _ in range(rng.randint(4, 12)):
        kind = rng.random()
        target = rng.choice(names[:3])
        if kind < 0.4:
            lines.append(f"  {target} += {expr(rng, names[:3])};")
        elif kind < 0.7:
            u = rng.choice([2, 4, 8])
            lines.append(
                f"  #pragma unroll {u}\n  for (int q = 0; q < {rng.randint(2, 7)}; ++q) "
                f"{{ {target} = fmaf(x[i + q], k[q * {u}], {target}); }}"
            )
        else:
            lines.append(
                f"  if ({target} > {rng.randint(0, 9)}.0f) {{ {target} = {expr(rng, names[:3])}; }} "
                f"else {{ {rng.choice(names[:3])} -= 1.0f; }}"
            )
        if rng.random() < 0.3:
            lines.append(f"  // team {team}: {rng.choice(['tiling', 'try unrolling', 'TODO faster', 'constant memory next'])}")
    lines.append(f"  if (i < n) y[i] = {' + '.join(names[:3])};")
    lines.append("}")
    return "\n".join(lines)


def student(rng: random.Random, team: int, starter: str) -> str:
    """The starter with the team's kernel added before the launcher, and its own names."""
    code = starter.replace("const char *conv_name()", kernel(rng, team) + "\n\nconst char *conv_name()", 1)
    return code.replace("tiles_w", rng.choice(["tiles_w", "tw", "ntiles", "grid_w"]))


def disguise(rng: random.Random, code: str) -> str:
    """A copy: every variable renamed, spacing changed, a few comment and blank lines added."""
    for name in NAMES:
        code = re.sub(rf"\b{name}\b", f"{name}_{rng.randint(10, 99)}", code)
    code = code.replace("; ", ";  ").replace(" = ", "=")
    lines = code.split("\n")
    for _ in range(5):
        lines.insert(rng.randrange(len(lines)), "  // my own work")
    return "\n".join(lines)


def corpus(teams: int, copies: int, seed: int) -> tuple[list[Doc], set[tuple[int, int]]]:
    rng = random.Random(seed)
    starter = STARTER.read_text()
    codes = [student(rng, t, starter) for t in range(teams)]
    planted: set[tuple[int, int]] = set()
    for c in range(copies):  # team 2c+1 copies team 2c's kernel
        a, b = 2 * c, 2 * c + 1
        codes[b] = disguise(rng, codes[a])
        planted.add((a, b))
    return [Doc(team=f"team{t:03d}", job_id=f"J{t:025d}", code=code) for t, code in enumerate(codes)], planted


def store_class(db: Database, storage: Storage, docs: list[Doc], prefix: str, kind: str = "final") -> None:
    """Each team's submission as the service keeps it: a student in the team, a finished job of
    ``kind``, its archive (new-forward.cu alone) in storage by sha256."""
    with db.session() as s:
        for d in docs:
            user, _ = create_user(s, f"{prefix}{d.team}", team=f"{prefix}{d.team}")
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w:gz") as tar:
                data = d.code.encode()
                info = tarfile.TarInfo("new-forward.cu")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            blob = buf.getvalue()
            sha = hashlib.sha256(blob).hexdigest()
            path = storage.archive_path(sha)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(blob)
            s.add(
                Job(
                    id=str(ULID()),
                    owner_id=user.id,
                    queue="gpu",
                    kind=kind,
                    state=JobState.succeeded,
                    image="rai/busybox:latest",
                    spec_yaml="",
                    archive_sha256=sha,
                    archive_bytes=len(blob),
                )
            )


def as_the_server_does(docs: list[Doc], db_url: str | None) -> None:
    """The report made by ``make`` from stored jobs and archives, progress noted in the database."""
    with tempfile.TemporaryDirectory() as tmp:
        db = Database(db_url or f"sqlite:///{tmp}/bench.sqlite3")
        migrate(db.engine)
        storage = Storage(Path(tmp) / "storage")
        store_class(db, storage, docs, prefix=f"b{int(time.time())}-")
        with db.session() as s:
            report = SimilarityReport(
                kind="final",
                state="queued",
                started_by="bench",
                starter=STARTER.read_text(),
                files=["new-forward.cu"],
                done=0,
                total=0,
                teams=0,
            )
            s.add(report)
            s.flush()
            rid = report.id
        beats = [0]
        t0 = time.perf_counter()
        make(db, storage, rid, lambda: beats.__setitem__(0, beats[0] + 1))
        took = time.perf_counter() - t0
        with db.session() as s:
            r = s.get_one(SimilarityReport, rid)
            print(
                f"as the server makes it ({db.engine.dialect.name}): {r.state} in {took:.1f} s: {r.message}; "
                f"{len(r.pairs or [])} pairs kept, {beats[0]} progress notes"
            )
        db.engine.dispose()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--teams", type=int, default=300)
    ap.add_argument("--copies", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--db", default=None, help="a database URL for the server's path (default: a fresh SQLite file)")
    args = ap.parse_args()
    docs, planted = corpus(args.teams, args.copies, args.seed)
    marks: dict[str, float] = {}
    t0 = time.perf_counter()

    def progress(phase: str, done: int, total: int) -> None:
        if phase not in marks:
            marks[phase] = time.perf_counter()

    pairs = compare(docs, STARTER.read_text(), progress)
    t1 = time.perf_counter()
    found = [(p.a, p.b) for p in pairs]
    ranks = sorted(found.index(pl) + 1 for pl in planted if pl in found)
    print(
        f"teams: {len(docs)} ({sum(len(d.code) for d in docs) // len(docs)} characters each on average), "
        f"pairs: {len(docs) * (len(docs) - 1) // 2}, planted copies: {len(planted)}"
    )
    print(
        f"fingerprinting: {marks['comparing'] - marks['reading']:.1f} s, comparing: {t1 - marks['comparing']:.1f} s, total: {t1 - t0:.1f} s"
    )
    print(f"planted copies found among the top {len(pairs)}: {len(ranks)} of {len(planted)}, at ranks {ranks}")
    top = pairs[0] if pairs else None
    if top:
        print(f"most similar: {docs[top.a].team} ~ {docs[top.b].team}: {top.score:.0%} ({top.tokens} tokens)")
    unplanted = [p for p in pairs if (p.a, p.b) not in planted]
    if unplanted:
        print(f"most similar pair that is not a copy: {unplanted[0].score:.0%}")
    as_the_server_does(docs, args.db)


if __name__ == "__main__":
    main()
