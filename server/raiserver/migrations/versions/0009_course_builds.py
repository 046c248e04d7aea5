"""course_builds: the course's build file (and answers) for each ranked kind, versioned;
jobs.course_build_id: the version a ranked run was built and timed with (issue 23)

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

from raiserver.store.db import UTCDateTime

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "course_builds",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("kind", sa.String(32), nullable=False, index=True),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("spec_yaml", sa.Text(), nullable=False),
        sa.Column("labels", sa.Text(), nullable=False),
        sa.Column("installed_by", sa.String(64), nullable=False),
        sa.Column("installed_at", UTCDateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("kind", "version"),
    )
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.add_column(sa.Column("course_build_id", sa.Integer(), nullable=True))
        batch_op.create_foreign_key("fk_jobs_course_build", "course_builds", ["course_build_id"], ["id"])


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.drop_constraint("fk_jobs_course_build", type_="foreignkey")
        batch_op.drop_column("course_build_id")
    op.drop_table("course_builds")
