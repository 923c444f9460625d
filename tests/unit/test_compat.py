"""Persisted names are compatibility data: renaming one strands runs in flight.

If one of these fails, you renamed something that is stored in Postgres or
Redis. Write a migration for it instead of editing this test.
"""

from __future__ import annotations

import sqlalchemy as sa

from store import schema
from store.leases import CANCEL_CHANNEL, LEASE_PREFIX, Holder
from store.models import (
    USAGE_ESTIMATED,
    Decision,
    EffectOutcome,
    EffectStatus,
    RunStatus,
    StepKind,
)


def test_status_values() -> None:
    assert [s.value for s in RunStatus] == [
        "queued",
        "running",
        "waiting",
        "completed",
        "failed",
        "cancelled",
        "interrupted",
    ]
    assert [k.value for k in StepKind] == ["llm", "tool", "wait", "state"]
    assert [e.value for e in EffectStatus] == ["started", "completed", "failed", "unknown"]
    assert [o.value for o in EffectOutcome] == ["done", "not_done"]
    assert [d.value for d in Decision] == ["approved", "denied", "withdrawn"]


def test_table_and_column_names() -> None:
    tables = {name: sorted(t.c.keys()) for name, t in schema.metadata.tables.items()}
    assert tables == {
        "runs": sorted(
            [
                "id",
                "agent",
                "status",
                "trigger",
                "trigger_id",
                "concurrency_key",
                "thread",
                "output",
                "error_code",
                "error_message",
                "input_tokens",
                "output_tokens",
                "steps_used",
                "state",
                "claim_owner",
                "claim_expires_at",
                "claim_epoch",
                "takeovers",
                "agent_missing_since",
                "cancel_requested",
                "enqueued_at",
                "created_at",
                "updated_at",
                "started_at",
                "finished_at",
                # 0004
                "retry_at",
                "retry_attempts",
                "retry_since",
                "retry_error",
                "extra_steps",
                "model",
                "forked_from",
                "forked_at_step",
                # 0005
                "trace_context",
                "cost_usd",
                # 0008
                "usage_estimated",
                # 0010
                "needs_attention",
                "cancelled_by",
                # 0011
                "interrupted_reason",
                "interrupted_by",
                "cost_unpriced",
                "parent_id",
                "parent_call_id",
                "detached",
                "budget_bounds",
            ]
        ),
        "steps": sorted(
            [
                "run_id",
                "id",
                "kind",
                "index",
                "name",
                "tool_call_id",
                "input",
                "output",
                "error",
                "input_tokens",
                "output_tokens",
                "cost_usd",
                "started_at",
                "finished_at",
            ]
        ),
        "messages": ["body", "run_id", "seq", "step_index"],
        # 0006: the run-event feed (store/events.py); its type values are data too.
        "run_events": ["at", "data", "id", "run_id", "type"],
        # 0009
        "tick_mark": ["finished_at", "id"],
        "run_attempts": sorted(
            [
                "run_id",
                "attempt",
                "status",
                "error_code",
                "error_message",
                "steps_used",
                "input_tokens",
                "output_tokens",
                "started_at",
                "finished_at",
                "extra_steps",
                "retried_at",
            ]
        ),
        "checkpoints": sorted(
            ["run_id", "step_index", "message_count", "finish_reason", "created_at"]
        ),
        "effects": sorted(
            [
                "run_id",
                "key",
                "tool",
                "input",
                "status",
                "attempts",
                "claim_epoch",
                "output",
                "error",
                "started_at",
                "finished_at",
                # 0010
                "resolved_outcome",
                "resolved_by",
                "resolved_note",
                "resolved_at",
            ]
        ),
        "approvals": sorted(
            [
                "approval_id",
                "run_id",
                "step_index",
                "tool_call_id",
                "tool_name",
                "input",
                "expires_at",
                "on_expire",
                "token_id",
                "notified_at",
                "next_notify_at",
                "attempts",
                "decision",
                "reason",
                "decided_at",
                "created_at",
                # 0007
                "decided_by",
            ]
        ),
    }


def test_what_a_runs_user_writes_is_json_not_jsonb() -> None:
    # jsonb sorts an object's keys; json reads back in the order written (0012).
    # The run-event data is the triggers' own, from columns (store/events.py).
    types = {
        (name, column.name): type(column.type).__name__
        for name, table in schema.metadata.tables.items()
        for column in table.columns
        if isinstance(column.type, sa.JSON)
    }
    assert types == {
        ("runs", "trigger"): "JSON",
        ("runs", "output"): "JSON",
        ("runs", "state"): "JSON",
        ("runs", "trace_context"): "JSON",
        ("runs", "budget_bounds"): "JSON",
        ("steps", "input"): "JSON",
        ("steps", "output"): "JSON",
        ("steps", "error"): "JSON",
        ("messages", "body"): "JSON",
        ("effects", "input"): "JSON",
        ("effects", "output"): "JSON",
        ("approvals", "input"): "JSON",
        ("run_events", "data"): "JSONB",
    }


def test_step_output_keys() -> None:
    # An llm step's output says its usage is an estimate under this key (0008's note).
    assert USAGE_ESTIMATED == "usage_estimated"


def test_redis_names_and_lease_format() -> None:
    assert LEASE_PREFIX == "runwright:lease:"
    assert CANCEL_CHANNEL == "runwright:cancel"
    assert Holder("host:1:abc", 7).encode() == "7:host:1:abc"
    assert Holder.decode(b"7:host:1:abc") == Holder("host:1:abc", 7)
