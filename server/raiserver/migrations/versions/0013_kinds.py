"""kinds and extensions (issue 36): each submission kind's opening, deadline, late policy and grade
rule, and per-student or per-team extensions; jobs.late_days: late days a submission drew. The
table is seeded from RAI_KINDS and RAI_DEADLINE as they are when the upgrade runs (the verified
kind keeps RAI_DEADLINE, its late runs kept but not ranked, as before), so an upgrade keeps what
they said; from then on the table is the truth (`raiclient admin kinds`).

Revision ID: 0013
Revises: 0012
"""

import sqlalchemy as sa
from alembic import op

from raiserver.store.db import UTCDateTime

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    kinds = op.create_table(
        "kinds",
        sa.Column("name", sa.String(32), primary_key=True),
        sa.Column("opens_at", UTCDateTime(timezone=True), nullable=True),
        sa.Column("due_at", UTCDateTime(timezone=True), nullable=True),
        sa.Column("late_policy", sa.String(16), nullable=False),
        sa.Column("late_hours", sa.Float(), nullable=True),
        sa.Column("grading", sa.JSON(), nullable=True),
    )
    op.create_table(
        "extensions",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("kind", sa.String(32), sa.ForeignKey("kinds.name", ondelete="CASCADE"), nullable=False, index=True),
        sa.Column("username", sa.String(64), nullable=True),
        sa.Column("team", sa.String(128), nullable=True),
        sa.Column("due_at", UTCDateTime(timezone=True), nullable=False),
        sa.Column("reason", sa.String(256), nullable=False),
        sa.Column("granted_by", sa.String(64), nullable=False),
        sa.Column("granted_at", UTCDateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("kind", "username", "team"),
    )
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.add_column(sa.Column("late_days", sa.Integer(), nullable=False, server_default="0"))
    from raiserver.config import load_settings

    s = load_settings()
    rows = [
        {
            "name": name,
            "opens_at": None,
            "late_hours": None,
            "grading": None,
            "due_at": s.deadline if name == s.verified_kind else None,
            "late_policy": "mark" if name == s.verified_kind and s.deadline else "refuse",
        }
        for name in sorted(s.kind_set)
    ]
    op.bulk_insert(kinds, rows)


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.drop_column("late_days")
    op.drop_table("extensions")
    op.drop_table("kinds")
