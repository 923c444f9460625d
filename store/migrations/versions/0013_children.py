"""child runs: a run started by a parent run's tool call (Agent.as_tool)

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02 02:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # The run whose tool call started this one, and that call's id; a detached
    # child runs on when its parent is cancelled.
    op.add_column(
        "runs",
        sa.Column(
            "parent_id",
            sa.Uuid(as_uuid=False),
            sa.ForeignKey("runs.id", name="runs_parent_id_fkey", ondelete="SET NULL"),
            nullable=True,
        ),
    )
    op.add_column("runs", sa.Column("parent_call_id", sa.Text(), nullable=True))
    op.add_column(
        "runs", sa.Column("detached", sa.Boolean(), nullable=False, server_default=sa.false())
    )
    # The token and cost budgets of its ancestors that bound a child too: a list of
    # {"run", "max_tokens", "max_cost_usd"}, checked against their totals live.
    op.add_column("runs", sa.Column("budget_bounds", sa.JSON(), nullable=True))
    op.create_index(
        "runs_parent_idx",
        "runs",
        ["parent_id", "id"],
        postgresql_where=sa.text("parent_id IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("runs_parent_idx", table_name="runs")
    op.drop_column("runs", "budget_bounds")
    op.drop_column("runs", "detached")
    op.drop_column("runs", "parent_call_id")
    op.drop_column("runs", "parent_id")
