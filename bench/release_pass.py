"""What fair share's release reads at a deadline of a whole term (issue 52): a term seeded by
``term_seed.py`` (250,000 jobs by default), then a waiting line of LINE jobs (every student at
the cap of ``RAI_MAX_ACTIVE_JOBS`` = 2 gives 800 for 400 students), and the release pass's reads
timed ``--rounds`` times each: the line in fair-share order (``fairshare.fair_order``: the waiting
jobs and one probe per waiting student of their last release) and the free slots. The line is
bounded by the cap, not by the term: the order costs the same at any size of the jobs table.

    .venv/bin/python bench/release_pass.py [--jobs 250000] [--lines 80,400,800] [--rounds 30]
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import term_seed  # noqa: E402 - the seeder beside this file

PG = "postgresql://postgres@127.0.0.1:5432"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=250_000)
    ap.add_argument("--lines", default="80,400,800")
    ap.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args()
    from sqlalchemy import create_engine, delete, select
    from sqlalchemy.orm import Session

    from raiprotocol.models import JobState
    from raiserver.jobs.fairshare import fair_order, free_slots
    from raiserver.store.db import utcnow
    from raiserver.store.tables import Job, User

    name = f"rai_release_{uuid.uuid4().hex[:8]}"
    data = Path(tempfile.mkdtemp(prefix="rai-release-"))
    url = f"{PG}/{name}"
    term_seed.create_database(url)
    try:
        started = time.monotonic()
        term = term_seed.seed(url, data, args.jobs, logs=0)
        print(f"seeded {term.jobs:,} jobs in {time.monotonic() - started:.0f} s")
        engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
        rng = random.Random(52)
        with Session(engine) as db:
            students = list(db.scalars(select(User.id).where(User.role == "student").order_by(User.id)))
            t = db.scalars(select(Job).limit(1)).one()
            queue, image, spec_yaml, sha = t.queue, t.image, t.spec_yaml, t.archive_sha256
            print("line  order p50  p95     free slots p50  (ms)")
            for line in (int(n) for n in args.lines.split(",")):
                db.execute(delete(Job).where(Job.state == JobState.queued, Job.released_at.is_(None), Job.id.like("Q%")))
                now = utcnow()
                for i in range(line):
                    owner_id = students[i // 2 % len(students)]
                    db.add(
                        Job(
                            id=f"Q{i:025d}",
                            owner_id=owner_id,
                            queue=queue,
                            kind="dev",
                            state=JobState.queued,
                            image=image,
                            spec_yaml=spec_yaml,
                            archive_sha256=sha,
                            created_at=now - timedelta(seconds=rng.uniform(0, 600)),
                        )
                    )
                db.commit()
                order_ms, free_ms = [], []
                for _ in range(args.rounds):
                    began = time.perf_counter()
                    order = fair_order(db, queue)
                    order_ms.append((time.perf_counter() - began) * 1000)
                    began = time.perf_counter()
                    free_slots(db, queue, 30.0)
                    free_ms.append((time.perf_counter() - began) * 1000)
                    db.expunge_all()
                waiting = sum(1 for j in order if j.id.startswith("Q"))
                assert waiting == line, (waiting, line)
                q = statistics.quantiles(order_ms, n=20)
                print(f"{line:4d}  {statistics.median(order_ms):9.1f}  {q[18]:5.1f}  {statistics.median(free_ms):14.1f}")
        engine.dispose()
    finally:
        term_seed.drop_database(url)
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
