"""agent versions: the version a run started on and runs on now, what changed
when it moved, the version of each journaled effect and each request for a
person, the versions seen, and a version event

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-07 02:20:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

# The version event (store/events.py then): a run moved from one version to
# another (an execution on a new version, or `runwright runs upgrade`).
# Frozen here, as every migration's SQL is.
_VERSION_FUNCTION = """CREATE FUNCTION runwright_version_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO run_events (run_id, type, data)
    VALUES (NEW.id, 'version', jsonb_strip_nulls(jsonb_build_object(
        'from', OLD.version, 'to', NEW.version,
        'changes', NEW.version_change -> 'changes', 'by', NEW.version_change -> 'by')));
    RETURN NULL;
END
$$
"""

_VERSION_TRIGGER = (
    "CREATE TRIGGER runs_version_events AFTER UPDATE OF version ON runs"
    " FOR EACH ROW WHEN (OLD.version IS NOT NULL AND OLD.version IS DISTINCT FROM NEW.version)"
    " EXECUTE FUNCTION runwright_version_events()"
)


def upgrade() -> None:
    # The runs there are have no version: their next execution records its own.
    op.add_column("runs", sa.Column("version", sa.Text(), nullable=True))
    op.add_column("runs", sa.Column("started_version", sa.Text(), nullable=True))
    op.add_column("runs", sa.Column("version_change", JSONB(), nullable=True))
    op.create_index(
        "runs_live_version_idx",
        "runs",
        ["agent", "version"],
        postgresql_where=sa.text("status IN ('queued', 'running', 'waiting', 'interrupted')"),
    )
    op.add_column("effects", sa.Column("version", sa.Text(), nullable=True))
    op.add_column("approvals", sa.Column("version", sa.Text(), nullable=True))
    op.add_column("approvals", sa.Column("tool_kind", sa.Text(), nullable=True))
    op.create_table(
        "agent_versions",
        sa.Column("agent", sa.Text(), primary_key=True),
        sa.Column("version", sa.Text(), primary_key=True),
        sa.Column("label", sa.Text(), nullable=True),
        sa.Column("policy", sa.Text(), nullable=False, server_default="continue"),
        sa.Column("definition", JSONB(), nullable=False),
        sa.Column(
            "first_seen", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.Column(
            "last_seen", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.CheckConstraint(
            "policy IN ('continue', 'pin', 'fail')", name="agent_versions_policy_valid"
        ),
    )
    op.drop_constraint("run_events_type_valid", "run_events", type_="check")
    op.create_check_constraint(
        "run_events_type_valid",
        "run_events",
        "type IN ('status', 'execution', 'approval', 'child', 'version')",
    )
    op.execute(_VERSION_FUNCTION)
    op.execute(_VERSION_TRIGGER)


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS runs_version_events ON runs")
    op.execute("DROP FUNCTION IF EXISTS runwright_version_events()")
    op.execute("DELETE FROM run_events WHERE type = 'version'")
    op.drop_constraint("run_events_type_valid", "run_events", type_="check")
    op.create_check_constraint(
        "run_events_type_valid",
        "run_events",
        "type IN ('status', 'execution', 'approval', 'child')",
    )
    op.drop_table("agent_versions")
    op.drop_column("approvals", "tool_kind")
    op.drop_column("approvals", "version")
    op.drop_column("effects", "version")
    op.drop_index("runs_live_version_idx", table_name="runs")
    op.drop_column("runs", "version_change")
    op.drop_column("runs", "started_version")
    op.drop_column("runs", "version")
