"""A term's pages do not cost more as the term goes on (issue 52): bench/term_pages.py's reduced form.
The same term is seeded at 2,000 and at 20,000 jobs (bench/term_seed.py, on PostgreSQL, through
the service's migrations) and every web page and CLI listing is asked of the app on each, with the
buffers its statements touch counted (EXPLAIN ANALYZE, BUFFERS): a page that reads the jobs table
touches ten times as many at ten times the jobs, a page that reads an index to its LIMIT about as
many. A count, not a time: the same on a loaded 2-core machine as on an idle one."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from helpers import ROOT, fresh_pg

sys.path.insert(0, str(ROOT / "bench"))
import term_pages  # noqa: E402 - bench/, put on the path above
import term_seed  # noqa: E402

from raiserver.grading.leaderboard import QUARANTINE_SCAN  # noqa: E402

pytestmark = pytest.mark.timeout(240)

# (jobs, students, teams): the class grows with the jobs, so that each student's own jobs are as
# many at both sizes: a page may read one student's jobs (to its LIMIT), never everyone's
SMALL, LARGE = (2_000, 40, 10), (20_000, 400, 100)
# A grade sheet grades every run of its kind (issue 36): it grows with the term by design, and its
# own target is a time (< 5 s for 400 students at 250,000 jobs: bench/term-pages.txt).
GROWS = {"grades m1", "grades m3", "grades final", "grades final, Canvas"}
# Staff's quarantine list looks at the newest QUARANTINE_SCAN ranked runs (issue 46): it grows with
# the term until there are that many, then reads no more.
BOUNDED = {"quarantine": QUARANTINE_SCAN}
SLACK = 40  # buffers: an index one level deeper, the planner's catalog reads
# A page of rows reads its rows' owners and teams: with ten times the students, a page of the same
# size holds up to 2.5 times as many distinct ones (the full suite once saw the staff's job list go
# 277 -> 662 buffers, the seed's draw); a page that scans the table reads ten times as much
GROWTH = 4


def costs_at(size: tuple[int, int, int], redis_url: str, tmp: Path) -> dict[str, term_pages.Cost]:
    jobs, students, teams = size
    made = fresh_pg()
    url = next(made)
    try:
        term_seed.seed(url, tmp / "storage", jobs, students, teams, logs=50)
        return term_pages.costs(url, tmp, redis_url, term_pages.pages(term_pages.targets(url, tmp / "storage")))
    finally:
        next(made, None)


def test_no_page_reads_more_of_the_database_as_the_term_grows(redis_url, tmp_path):
    small = costs_at(SMALL, redis_url, tmp_path / "small")
    large = costs_at(LARGE, redis_url, tmp_path / "large")
    assert not term_pages.FAILED, f"pages that did not answer 200: {term_pages.FAILED}"
    table = "\n".join(
        f"{name:24} {small[name].buffers:7d} -> {large[name].buffers:7d} buffers, {small[name].statements:4d} -> "
        f"{large[name].statements:4d} statements"
        for name in small
    )
    print(table)
    grew = [name for name in small if name not in GROWS | set(BOUNDED) and large[name].buffers > GROWTH * small[name].buffers + SLACK]
    assert not grew, f"pages whose database reads grew with the table ({SMALL[0]:,} -> {LARGE[0]:,} jobs):\n{table}"
    more = [name for name in small if name not in GROWS and large[name].statements > small[name].statements + 5]
    assert not more, f"pages whose statements grew with the table (a query per row):\n{table}"
    over = [name for name, most in BOUNDED.items() if large[name].rows > most + 10]
    assert not over, f"pages that read more than their bound: {over}\n{table}"
