"""trigger stored as json (keeps the caller's key order); agent_missing_since

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30 06:50:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # jsonb sorts object keys; json keeps the text as written, so the first
    # message renders the payload in the caller's order. Rows written before
    # keep the order jsonb gave them.
    op.alter_column(
        "runs",
        "trigger",
        type_=sa.JSON(),
        existing_type=postgresql.JSONB(),
        existing_nullable=False,
        postgresql_using="trigger::json",
    )
    # When a worker first claimed the run without knowing its agent (a rolling
    # deploy): the run is given back until a grace period has passed.
    op.add_column("runs", sa.Column("agent_missing_since", sa.DateTime(timezone=True)))


def downgrade() -> None:
    op.drop_column("runs", "agent_missing_since")
    op.alter_column(
        "runs",
        "trigger",
        type_=postgresql.JSONB(),
        existing_type=sa.JSON(),
        existing_nullable=False,
        postgresql_using="trigger::jsonb",
    )
