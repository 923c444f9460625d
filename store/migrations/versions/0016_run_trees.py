"""run trees: every child run names its ancestors and its top-level run, and
holds the tokens its model call in flight reserved from the budgets it shares

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06 03:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

# The chains of the children that exist, whatever their depth: parent first,
# top-level run last. A parent pruned before (parent_id set NULL) ends its chain.
_BACKFILL = """
WITH RECURSIVE up (id, ancestor, depth) AS (
    SELECT id, parent_id, 1 FROM runs WHERE parent_id IS NOT NULL
    UNION ALL
    SELECT up.id, r.parent_id, up.depth + 1 FROM up JOIN runs AS r ON r.id = up.ancestor
     WHERE r.parent_id IS NOT NULL
), chains AS (
    SELECT id, array_agg(ancestor ORDER BY depth) AS ancestors FROM up GROUP BY id
)
UPDATE runs SET ancestors = chains.ancestors,
                root_id = chains.ancestors[cardinality(chains.ancestors)]
  FROM chains WHERE runs.id = chains.id
"""


def upgrade() -> None:
    op.add_column("runs", sa.Column("root_id", sa.Uuid(as_uuid=False), nullable=True))
    op.add_column(
        "runs",
        sa.Column("ancestors", postgresql.ARRAY(sa.Uuid(as_uuid=False)), nullable=True),
    )
    op.add_column(
        "runs",
        sa.Column("reserved_tokens", sa.BigInteger(), nullable=False, server_default="0"),
    )
    op.execute(_BACKFILL)
    op.create_index(
        "runs_root_reserved_idx",
        "runs",
        ["root_id"],
        postgresql_where=sa.text("reserved_tokens > 0"),
    )


def downgrade() -> None:
    op.drop_index("runs_root_reserved_idx", table_name="runs")
    op.drop_column("runs", "reserved_tokens")
    op.drop_column("runs", "ancestors")
    op.drop_column("runs", "root_id")
