"""why an execution gave its run back (a drain, a worker without the agent), and which owner

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01 20:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # store/models.Interruption; set by the write that interrupts the run,
    # cleared by the next outcome (store/pg/base.OUTCOME_SET).
    op.add_column("runs", sa.Column("interrupted_reason", sa.Text(), nullable=True))
    op.add_column("runs", sa.Column("interrupted_by", sa.Text(), nullable=True))
    op.create_check_constraint(
        "runs_interrupted_reason_valid",
        "runs",
        "interrupted_reason IS NULL OR interrupted_reason IN ('drain', 'agent_missing')",
    )


def downgrade() -> None:
    op.drop_constraint("runs_interrupted_reason_valid", "runs", type_="check")
    op.drop_column("runs", "interrupted_by")
    op.drop_column("runs", "interrupted_reason")
