"""jobs.lease_at: when the run holding a job last renewed its lease (issue 33); the server hands
the job to another worker only once neither this nor the run's Redis renewals are fresh

Revision ID: 0011
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

from raiserver.store.db import UTCDateTime

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.add_column(sa.Column("lease_at", UTCDateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.drop_column("lease_at")
