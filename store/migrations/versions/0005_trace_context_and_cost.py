"""trace context carried with a run; cost in USD per step and per run

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30 09:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # W3C trace context of the request that started the run (traceparent,
    # tracestate): its executions, in other processes, join that trace.
    op.add_column("runs", sa.Column("trace_context", sa.JSON()))
    # What the model calls cost, from litellm's cost map (0 when unpriced).
    op.add_column("runs", sa.Column("cost_usd", sa.Float(), server_default="0", nullable=False))
    op.add_column("steps", sa.Column("cost_usd", sa.Float()))


def downgrade() -> None:
    op.drop_column("steps", "cost_usd")
    op.drop_column("runs", "cost_usd")
    op.drop_column("runs", "trace_context")
