"""arrival order: the runs of a concurrency key go oldest first by the order
the database took them in, not by their ids, which each web server mints
from its own clock

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-06 05:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

_QUEUED_OF_A_KEY = "concurrency_key IS NOT NULL AND status = 'queued'"


def upgrade() -> None:
    op.execute("CREATE SEQUENCE runs_arrival_seq AS bigint")
    op.add_column("runs", sa.Column("arrival", sa.BigInteger(), nullable=True))
    # The runs there are: in id order, the order they were taken in until now.
    op.execute(
        """
        UPDATE runs SET arrival = n.arrival
          FROM (SELECT id, nextval('runs_arrival_seq') AS arrival
                  FROM (SELECT id FROM runs ORDER BY id) AS ordered) AS n
         WHERE runs.id = n.id
        """
    )
    op.execute("ALTER SEQUENCE runs_arrival_seq OWNED BY runs.arrival")
    op.alter_column(
        "runs",
        "arrival",
        nullable=False,
        server_default=sa.text("nextval('runs_arrival_seq')"),
    )
    op.drop_index("runs_key_queue_idx", table_name="runs")
    op.create_index(
        "runs_key_queue_idx",
        "runs",
        ["concurrency_key", "arrival"],
        postgresql_where=sa.text(_QUEUED_OF_A_KEY),
    )


def downgrade() -> None:
    op.drop_index("runs_key_queue_idx", table_name="runs")
    op.create_index(
        "runs_key_queue_idx",
        "runs",
        ["concurrency_key", "id"],
        postgresql_where=sa.text(_QUEUED_OF_A_KEY),
    )
    op.drop_column("runs", "arrival")  # the sequence it owns goes with it
