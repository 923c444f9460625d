"""count takeovers without progress

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 06:20:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A constant default: Postgres adds the column without rewriting the table.
    op.add_column("runs", sa.Column("takeovers", sa.Integer(), server_default="0", nullable=False))


def downgrade() -> None:
    op.drop_column("runs", "takeovers")
