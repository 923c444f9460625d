"""a request for a person addressed to the thread's own user (a question or
an approval in a chat, docs/conversations.md)

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-07 06:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # The requests there are were addressed to anyone who may decide.
    op.add_column("approvals", sa.Column("addressed_to", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("approvals", "addressed_to")
