"""users.sessions_after: browser sessions begun before it are over (logout ends a session for
good; its signed cookie was valid for 12 h after); jobs.build_bytes and jobs.archive_kept: what a
job holds in storage, for the per-student storage quota and the retention rules; workers.arch:
the CPU architecture a worker's jobs run on (a build file's cpu.architecture is checked against it)

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

from raiserver.store.db import UTCDateTime

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("users") as batch_op:
        batch_op.add_column(sa.Column("sessions_after", UTCDateTime(timezone=True), nullable=True))
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.add_column(sa.Column("build_bytes", sa.BigInteger(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("archive_kept", sa.Boolean(), nullable=False, server_default=sa.true()))
    with op.batch_alter_table("workers") as batch_op:
        batch_op.add_column(sa.Column("arch", sa.String(16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("workers") as batch_op:
        batch_op.drop_column("arch")
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.drop_column("archive_kept")
        batch_op.drop_column("build_bytes")
    with op.batch_alter_table("users") as batch_op:
        batch_op.drop_column("sessions_after")
