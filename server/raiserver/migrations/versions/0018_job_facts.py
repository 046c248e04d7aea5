"""jobs.wall_seconds and jobs.claimed_at: a job's facts resolved once (issue 47) instead of read
again on every view (the build file's YAML parsed for each waiting job's wall limit, the claim's
time searched in the phases' JSON). Jobs from before keep NULL: their build file is parsed when
asked, and a running one's claim is taken from its phases or start.

Revision ID: 0018
Revises: 0017
"""

import sqlalchemy as sa
from alembic import op

from raiserver.store.db import UTCDateTime

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("wall_seconds", sa.Integer(), nullable=True))
    op.add_column("jobs", sa.Column("claimed_at", UTCDateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "claimed_at")
    op.drop_column("jobs", "wall_seconds")
