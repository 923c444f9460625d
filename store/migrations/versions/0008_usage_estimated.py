"""whether a run's token figures are estimates (the provider reported no usage)

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 11:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # True once a model call of the run reported no usage and its tokens were
    # counted by litellm's tokenizer (runner/core/model.py). An llm step says the
    # same in its output (``usage_estimated``), so steps need no column.
    # A constant default: Postgres adds the column without rewriting the table.
    op.add_column(
        "runs",
        sa.Column("usage_estimated", sa.Boolean(), server_default=sa.false(), nullable=False),
    )


def downgrade() -> None:
    op.drop_column("runs", "usage_estimated")
