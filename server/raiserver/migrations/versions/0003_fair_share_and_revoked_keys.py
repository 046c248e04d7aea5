"""jobs.dispatched_at (fair-share release to Celery) and revoked_keys

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

from raiserver.store.db import UTCDateTime

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.add_column(sa.Column("dispatched_at", UTCDateTime(timezone=True), nullable=True))
    op.create_table(
        "revoked_keys",
        sa.Column("access_key", sa.String(length=64), nullable=False),
        sa.Column("username", sa.String(length=64), nullable=False),
        sa.Column("at", UTCDateTime(timezone=True), nullable=False),
        sa.Column("reason", sa.String(length=32), nullable=False),
        sa.PrimaryKeyConstraint("access_key"),
    )


def downgrade() -> None:
    op.drop_table("revoked_keys")
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.drop_column("dispatched_at")
