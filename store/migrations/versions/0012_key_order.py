"""what a run's user writes is stored as json: it reads back in the order written

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02 09:00:00

jsonb sorts an object's keys (shortest first), so ``{"zeta": 1, "alpha": 2}``
read back as ``{"alpha": 2, "zeta": 1}``: the structured output, a tool's
arguments and result, the run's state, an approval's arguments and the
history the model is sent on a resume. json keeps the text as written, as the
trigger has since 0003. The order of rows written before this revision is
lost already: they keep the order jsonb gave them. Each column changes type in
place, which rewrites its table under an exclusive lock; on a large ``steps``
or ``messages`` table, run it when no workers are running.

The run-event data (``run_events.data``) stays jsonb: the triggers of
store/events.py write it, from columns, with no caller's order to keep.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

# (table, column, nullable)
COLUMNS = (
    ("runs", "output", True),
    ("runs", "state", True),
    ("steps", "input", True),
    ("steps", "output", True),
    ("steps", "error", True),
    ("messages", "body", False),
    ("effects", "input", True),
    ("effects", "output", True),
    ("approvals", "input", True),
)


def upgrade() -> None:
    for table, column, nullable in COLUMNS:
        op.alter_column(
            table,
            column,
            type_=sa.JSON(),
            existing_type=postgresql.JSONB(),
            existing_nullable=nullable,
            postgresql_using=f'"{column}"::json',
        )


def downgrade() -> None:
    for table, column, nullable in COLUMNS:
        op.alter_column(
            table,
            column,
            type_=postgresql.JSONB(),
            existing_type=sa.JSON(),
            existing_nullable=nullable,
            postgresql_using=f'"{column}"::jsonb',
        )
