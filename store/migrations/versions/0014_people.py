"""people beyond yes and no: edited arguments, questions and their answers, a tool
approved for the rest of a run, a run that fails on a person's denial

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-02 14:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


# The approval-event function as this revision leaves it (store/events.py
# then). Frozen here, as every migration's SQL is.
_APPROVAL_FUNCTION = """
CREATE OR REPLACE FUNCTION runwright_approval_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO run_events (run_id, type, data)
    VALUES (NEW.run_id, 'approval', jsonb_build_object(
        'action', CASE WHEN NEW.decision IS NULL THEN 'requested' ELSE 'decided' END,
        'approval_id', NEW.approval_id, 'step_index', NEW.step_index,
        'tool_call_id', NEW.tool_call_id, 'tool_name', NEW.tool_name,
        'decision', NEW.decision, 'reason', NEW.reason, 'decided_by', NEW.decided_by,
        'decided_at', to_jsonb(NEW.decided_at), 'expires_at', to_jsonb(NEW.expires_at))
        || jsonb_build_object(
        'kind', NEW.kind, 'input', to_jsonb(NEW.input), 'arguments', to_jsonb(NEW.arguments),
        'edited', NEW.arguments IS NOT NULL, 'answer', to_jsonb(NEW.answer),
        'for_run', NEW.for_run, 'standing_from', NEW.standing_from));
    RETURN NULL;
END
$$
"""

# As revision 0011 left it.
_APPROVAL_FUNCTION_0011 = """
CREATE OR REPLACE FUNCTION runwright_approval_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO run_events (run_id, type, data)
    VALUES (NEW.run_id, 'approval', jsonb_build_object(
        'action', CASE WHEN NEW.decision IS NULL THEN 'requested' ELSE 'decided' END,
        'approval_id', NEW.approval_id, 'step_index', NEW.step_index,
        'tool_call_id', NEW.tool_call_id, 'tool_name', NEW.tool_name,
        'decision', NEW.decision, 'reason', NEW.reason, 'decided_by', NEW.decided_by,
        'decided_at', to_jsonb(NEW.decided_at), 'expires_at', to_jsonb(NEW.expires_at)));
    RETURN NULL;
END
$$
"""


def upgrade() -> None:
    # A request for a person is an approval of a tool call, or a question the
    # model asked (ask_human); what a person's edit or answer must fit; the
    # edited arguments the call ran with; the answer; a decision for the rest
    # of the run, and the later decisions it made; what a denial does.
    op.add_column(
        "approvals", sa.Column("kind", sa.Text(), nullable=False, server_default="approval")
    )
    op.add_column("approvals", sa.Column("schema", sa.JSON(), nullable=True))
    op.add_column("approvals", sa.Column("arguments", sa.JSON(), nullable=True))
    op.add_column("approvals", sa.Column("answer", sa.JSON(), nullable=True))
    op.add_column(
        "approvals",
        sa.Column("for_run", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    op.add_column("approvals", sa.Column("standing_from", sa.Uuid(as_uuid=False), nullable=True))
    op.add_column(
        "approvals", sa.Column("on_deny", sa.Text(), nullable=False, server_default="continue")
    )
    op.drop_constraint("approvals_decision_valid", "approvals", type_="check")
    op.create_check_constraint(
        "approvals_decision_valid",
        "approvals",
        "decision IS NULL OR decision IN ('approved', 'denied', 'withdrawn', 'answered')",
    )
    op.create_check_constraint("approvals_kind_valid", "approvals", "kind IN ('approval', 'input')")
    op.create_check_constraint(
        "approvals_on_deny_valid", "approvals", "on_deny IN ('continue', 'fail')"
    )
    op.create_table(
        "standing_approvals",
        sa.Column(
            "run_id",
            sa.Uuid(as_uuid=False),
            sa.ForeignKey("runs.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("tool_name", sa.Text(), primary_key=True),
        sa.Column("approval_id", sa.Uuid(as_uuid=False), nullable=False),
        sa.Column("granted_by", sa.Text(), nullable=True),
        sa.Column(
            "granted_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.text("now()"),
        ),
    )
    op.execute(_APPROVAL_FUNCTION)


def downgrade() -> None:
    op.execute(_APPROVAL_FUNCTION_0011)
    op.drop_table("standing_approvals")
    # An answered question reads as an approval 0013 knows: its call ran.
    op.execute("UPDATE approvals SET decision = 'approved' WHERE decision = 'answered'")
    op.drop_constraint("approvals_on_deny_valid", "approvals", type_="check")
    op.drop_constraint("approvals_kind_valid", "approvals", type_="check")
    op.drop_constraint("approvals_decision_valid", "approvals", type_="check")
    op.create_check_constraint(
        "approvals_decision_valid",
        "approvals",
        "decision IS NULL OR decision IN ('approved', 'denied', 'withdrawn')",
    )
    for column in ("on_deny", "standing_from", "for_run", "answer", "arguments", "schema", "kind"):
        op.drop_column("approvals", column)
