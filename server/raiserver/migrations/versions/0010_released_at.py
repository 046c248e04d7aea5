"""jobs.dispatched_at is jobs.released_at: one name for when fair share hands a job to the
workers' queue, as the API and the web view already said (issue 27)

Revision ID: 0010
Revises: 0009
"""

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.alter_column("dispatched_at", new_column_name="released_at")


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.alter_column("released_at", new_column_name="dispatched_at")
