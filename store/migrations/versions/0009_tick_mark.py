"""when tick() last finished, kept in Postgres as well as in Redis

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01 12:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # One row; a Redis restart loses Redis's copy of the mark, not this one.
    op.create_table(
        "tick_mark",
        sa.Column("id", sa.SmallInteger(), primary_key=True, autoincrement=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("id = 1", name="tick_mark_one_row"),
    )


def downgrade() -> None:
    op.drop_table("tick_mark")
