"""Names other processes and stored rows depend on: a worker of the previous
release, a run in flight, a message in the broker, a Redis key. Moving code must
never rename them; a deliberate rename fails here first and needs a migration
(tables, columns, statuses) or a release note (task names, Redis keys)."""

from __future__ import annotations

from runner.celery import EXECUTE, TICK
from runner.core.audit import AuditAction
from runner.core.coordination import leases
from store.models import (
    Decision,
    EffectStatus,
    EvaluationCaseStatus,
    EvaluationStatus,
    Interruption,
    RunStatus,
    StepKind,
)
from store.schema import metadata

TABLES = {
    "audit": ["id", "at", "actor", "source", "action", "run_id", "detail", "prev_hash", "hash"],
    "agent_versions": [
        "agent", "version", "label", "policy", "definition", "first_seen", "last_seen",
    ],
    "approvals": [
        "approval_id", "run_id", "step_index", "tool_call_id", "tool_name", "input",
        "expires_at", "on_expire", "token_id", "notified_at", "next_notify_at", "attempts",
        "decision", "reason", "decided_at", "created_at", "decided_by", "kind", "schema",
        "arguments", "answer", "for_run", "standing_from", "on_deny", "version", "tool_kind",
        "addressed_to",
    ],
    "checkpoints": ["run_id", "step_index", "message_count", "finish_reason", "created_at"],
    "datasets": [
        "name", "version", "created_at", "created_by", "description", "query", "case_count",
    ],
    "dataset_cases": ["name", "version", "position", "data"],
    "effects": [
        "run_id", "key", "tool", "input", "status", "attempts", "claim_epoch", "output",
        "error", "started_at", "finished_at", "resolved_outcome", "resolved_by",
        "resolved_note", "resolved_at", "version",
    ],
    "evaluations": [
        "id", "dataset", "dataset_version", "agent", "label", "baseline", "status",
        "created_at", "finished_at", "created_by", "options", "summary", "case_count",
    ],
    "evaluation_cases": [
        "evaluation_id", "position", "status", "claimed_by", "claimed_until", "attempts",
        "result", "scores", "duration_ms", "cost_usd", "tokens",
    ],
    "messages": ["run_id", "seq", "body", "step_index"],
    "run_attempts": [
        "run_id", "attempt", "status", "error_code", "error_message", "steps_used",
        "input_tokens", "output_tokens", "started_at", "finished_at", "extra_steps",
        "retried_at",
    ],
    "run_events": ["run_id", "id", "type", "data", "at"],
    "runs": [
        "id", "agent", "status", "trigger", "trigger_id", "concurrency_key", "thread",
        "output", "error_code", "error_message", "input_tokens", "output_tokens",
        "steps_used", "state", "claim_owner", "claim_expires_at", "claim_epoch", "takeovers",
        "agent_missing_since", "cancel_requested", "retry_at", "retry_attempts",
        "retry_since", "retry_error", "extra_steps", "model", "forked_from",
        "forked_at_step", "trace_context", "cost_usd", "usage_estimated", "needs_attention",
        "cancelled_by", "interrupted_reason", "interrupted_by", "cost_unpriced",
        "parent_id", "parent_call_id", "detached", "budget_bounds", "root_id", "ancestors",
        "reserved_tokens", "arrival", "tenant", "priority", "parked_key", "version",
        "started_version", "version_change", "erased_at", "erased_by", "enqueued_at",
        "created_at",
        "updated_at", "started_at", "finished_at",
    ],
    "steps": [
        "run_id", "id", "kind", "index", "name", "tool_call_id", "input", "output", "error",
        "input_tokens", "output_tokens", "cost_usd", "started_at", "finished_at",
    ],
    "standing_approvals": ["run_id", "tool_name", "approval_id", "granted_by", "granted_at"],
    "schedules": [
        "name", "agent", "cron", "timezone", "every_seconds", "payload", "thread", "keys",
        "overlap", "catchup_window_seconds", "jitter_seconds", "paused", "next_at",
        "next_due_at", "created_at", "updated_at", "priority",
    ],
    "schedule_firings": ["schedule", "scheduled_at", "outcome", "run_id", "reason", "fired_at"],
    "tick_mark": ["id", "finished_at"],
}  # fmt: skip


def test_tables_and_columns_keep_their_names() -> None:
    assert {t.name: [c.name for c in t.columns] for t in metadata.tables.values()} == TABLES


def test_stored_enum_values_keep_their_spelling() -> None:
    assert [s.value for s in RunStatus] == [
        "queued", "running", "waiting", "completed", "failed", "cancelled", "interrupted",
    ]  # fmt: skip
    assert [k.value for k in StepKind] == ["llm", "tool", "wait", "state"]
    assert [d.value for d in Decision] == ["approved", "denied", "withdrawn", "answered"]
    assert [i.value for i in Interruption] == ["drain", "agent_missing"]
    assert [e.value for e in EffectStatus] == ["started", "completed", "failed", "unknown"]
    assert [e.value for e in EvaluationStatus] == ["running", "completed", "cancelled"]
    assert [c.value for c in EvaluationCaseStatus] == ["pending", "running", "done"]
    assert [a.value for a in AuditAction] == [
        "viewed_payloads", "decided", "edited", "answered", "cancelled", "retried", "forked",
        "resolved_effect", "erased", "upgraded_runs", "rotated_keys", "exported",
    ]  # fmt: skip


def test_task_names_and_redis_keys_keep_their_names() -> None:
    assert (EXECUTE, TICK) == ("runwright.execute", "runwright.tick")
    assert leases.LEASE_PREFIX == "runwright:lease:"
    assert leases.CANCEL_CHANNEL == "runwright:cancel"
    assert leases.TICK_LOCK_KEY == "runwright:tick"
    assert leases.LAST_TICK_KEY == "runwright:beacon:tick"
    assert leases.WORKER_PREFIX == "runwright:beacon:worker:"
