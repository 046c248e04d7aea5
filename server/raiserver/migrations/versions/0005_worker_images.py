"""workers.images and workers.pulls: the images each worker holds (None: any) and its pulls

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workers") as batch_op:
        batch_op.add_column(sa.Column("images", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("pulls", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("workers") as batch_op:
        batch_op.drop_column("pulls")
        batch_op.drop_column("images")
