"""jobs.log_stored dropped: written at every job's end and never read (a finished job's log is
always stored: finish_job archives it before it commits the state)

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.drop_column("log_stored")


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.add_column(sa.Column("log_stored", sa.Boolean(), nullable=False, server_default=sa.false()))
