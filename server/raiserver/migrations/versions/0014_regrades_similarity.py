"""regrade_requests: a student asks for a regrade of one run; staff re-measure it, adjust its grade
with a reason, or answer (issue 36). At most one open request per run and student.
similarity_reports: staff's pairwise similarity reports over each team's latest submission of a kind.

Revision ID: 0014
Revises: 0012
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "regrade_requests",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("job_id", sa.String(26), sa.ForeignKey("jobs.id"), nullable=False, index=True),
        sa.Column("student_id", sa.Integer(), sa.ForeignKey("users.id"), nullable=False, index=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("state", sa.String(8), nullable=False, index=True),
        sa.Column("outcome", sa.String(16), nullable=True),
        sa.Column("answer", sa.Text(), nullable=True),
        sa.Column("grade", sa.String(32), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("remeasure_job", sa.String(26), nullable=True),
        sa.Column("closed_by", sa.String(64), nullable=True),
        sa.Column("closed_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index(
        "one_open_regrade",
        "regrade_requests",
        ["job_id", "student_id"],
        unique=True,
        postgresql_where=sa.text("state = 'open'"),
        sqlite_where=sa.text("state = 'open'"),
    )
    op.create_table(
        "similarity_reports",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("state", sa.String(8), nullable=False, index=True),
        sa.Column("started_by", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("phase", sa.String(16), nullable=True),
        sa.Column("done", sa.Integer(), nullable=False),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.Column("teams", sa.Integer(), nullable=False),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("starter", sa.Text(), nullable=False),
        sa.Column("files", sa.JSON(), nullable=True),
        sa.Column("pairs", sa.JSON(), nullable=True),
        sa.Column("code", sa.JSON(), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("similarity_reports")
    op.drop_index("one_open_regrade", table_name="regrade_requests")
    op.drop_table("regrade_requests")
