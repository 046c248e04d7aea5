"""jobs.remeasure_of and jobs.repeats: a ranked entry staff asked to measure again (issue 32) is a
new job that runs the same archive with the same course build, more timed runs, and replaces the
original on the board once it ends

Revision ID: 0012
Revises: 0011
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.add_column(sa.Column("remeasure_of", sa.String(26), nullable=True))
        batch_op.add_column(sa.Column("repeats", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.drop_column("repeats")
        batch_op.drop_column("remeasure_of")
