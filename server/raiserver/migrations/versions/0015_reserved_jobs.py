"""jobs.reserved: a ranked run (built and timed by the course's build file, or a staff re-measure).
Such runs are released on capacity of their own, one reserved place per worker host, not on the
queue's shared slots (issue 32): a ranked run never waits in the queue behind shared jobs, and
while it waits for its host to empty it holds none of the host's slots. Existing ranked runs (those
the course's build file built) are marked.

Revision ID: 0015
Revises: 0014
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("reserved", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.execute("UPDATE jobs SET reserved = TRUE WHERE course_build_id IS NOT NULL")


def downgrade() -> None:
    op.drop_column("jobs", "reserved")
