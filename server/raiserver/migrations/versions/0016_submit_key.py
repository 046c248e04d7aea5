"""jobs.submit_key: the key a client sends with a submission (Idempotency-Key), unique per owner.
A client that uploads again after a server restart or a lost answer sends the same key, and the
server answers with the job that upload made instead of making a second one (issue 51). Older
jobs and clients have none (NULLs never collide).

Revision ID: 0016
Revises: 0015
"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("submit_key", sa.String(64), nullable=True))
    op.create_index("ix_jobs_owner_submit_key", "jobs", ["owner_id", "submit_key"], unique=True)


def downgrade() -> None:
    op.drop_index("ix_jobs_owner_submit_key", table_name="jobs")
    op.drop_column("jobs", "submit_key")
