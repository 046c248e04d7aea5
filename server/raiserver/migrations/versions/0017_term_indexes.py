"""Indexes for a whole term in one database (issue 52): at 250,000 jobs each of these queries read
the whole jobs table (400 MiB) on every page that asked it (bench/term_pages.py, EXPLAIN ANALYZE):

- the late days drawn per student and kind (``Deadlines``, on every page that shows a deadline, a
  late mark or a limit): a partial index of the few late submissions, read alone (index-only);
- the latest runs on a queue by start (the ETA's history, ``QueueView._recent``): (queue, started_at),
  read backwards to its LIMIT;
- each waiting student's last release (fair share's order): (owner_id, released_at), one probe each;
- a student's jobs newest first (``history``, their page, their limits): (owner_id, created_at);
- a student's GPU minutes of the last day (their limits, every submission): (owner_id, started_at);
- jobs by end (the metrics' new ends since the last scrape, the boards' new runs): finished_at;
- the re-measures of some runs (the regrades page, the grade sheets): a partial index of the few.

Revision ID: 0017
Revises: 0016
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

LATE = sa.text("late_days > 0")
REMEASURE = sa.text("remeasure_of IS NOT NULL")


def upgrade() -> None:
    op.create_index("ix_jobs_late_days", "jobs", ["owner_id", "kind", "late_days"], postgresql_where=LATE, sqlite_where=LATE)
    op.create_index("ix_jobs_queue_started", "jobs", ["queue", "started_at"])
    op.create_index("ix_jobs_owner_released", "jobs", ["owner_id", "released_at"])
    op.create_index("ix_jobs_owner_created", "jobs", ["owner_id", "created_at"])
    op.create_index("ix_jobs_owner_started", "jobs", ["owner_id", "started_at"])
    op.create_index("ix_jobs_finished_at", "jobs", ["finished_at"])
    op.create_index("ix_jobs_remeasure_of", "jobs", ["remeasure_of"], postgresql_where=REMEASURE, sqlite_where=REMEASURE)


def downgrade() -> None:
    for name in (
        "ix_jobs_remeasure_of",
        "ix_jobs_finished_at",
        "ix_jobs_owner_created",
        "ix_jobs_owner_released",
        "ix_jobs_queue_started",
        "ix_jobs_late_days",
    ):
        op.drop_index(name, table_name="jobs")
