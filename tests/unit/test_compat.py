"""Persisted names are compatibility data: renaming one strands runs in flight.

If one of these fails, you renamed something that is stored in Postgres or
Redis. Write a migration for it instead of editing this test. The tables and
their columns are pinned once, in ``test_persisted_names.py``.
"""

from __future__ import annotations

import sqlalchemy as sa

from runner.core.coordination.leases import CANCEL_CHANNEL, LEASE_PREFIX, Holder
from store import schema
from store.models import (
    USAGE_ESTIMATED,
    Decision,
    EffectOutcome,
    EffectStatus,
    EvaluationCaseStatus,
    EvaluationStatus,
    FiringOutcome,
    OnDeny,
    Overlap,
    RequestKind,
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
    assert [e.value for e in EvaluationStatus] == ["running", "completed", "cancelled"]
    assert [c.value for c in EvaluationCaseStatus] == ["pending", "running", "done"]
    assert [o.value for o in EffectOutcome] == ["done", "not_done"]
    assert [d.value for d in Decision] == ["approved", "denied", "withdrawn", "answered"]
    assert [k.value for k in RequestKind] == ["approval", "input"]
    assert [d.value for d in OnDeny] == ["continue", "fail"]
    assert [o.value for o in Overlap] == ["skip", "buffer_one", "allow_all", "cancel_other"]
    assert [o.value for o in FiringOutcome] == [
        "started",
        "skipped",
        "buffered",
        "missed",
        "triggered",
    ]


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
        ("approvals", "schema"): "JSON",
        ("approvals", "arguments"): "JSON",
        ("approvals", "answer"): "JSON",
        ("schedules", "payload"): "JSON",
        ("schedules", "keys"): "JSON",
        # A dataset's cases and an evaluation's case reports: runs' data (0022).
        ("dataset_cases", "data"): "JSON",
        ("evaluation_cases", "result"): "JSON",
        ("run_events", "data"): "JSONB",
        # Runwright's own, not a user's: versions and what changed between them (0019).
        ("runs", "version_change"): "JSONB",
        ("agent_versions", "definition"): "JSONB",
        ("audit", "detail"): "JSONB",
        # How a dataset was built, an evaluation's options, summary and scores (0022).
        ("datasets", "query"): "JSONB",
        ("evaluations", "options"): "JSONB",
        ("evaluations", "summary"): "JSONB",
        ("evaluation_cases", "scores"): "JSONB",
    }


def test_step_output_keys() -> None:
    # An llm step's output says its usage is an estimate under this key (0008's note).
    assert USAGE_ESTIMATED == "usage_estimated"


def test_redis_names_and_lease_format() -> None:
    assert LEASE_PREFIX == "runwright:lease:"
    assert CANCEL_CHANNEL == "runwright:cancel"
    assert Holder("host:1:abc", 7).encode() == "7:host:1:abc"
    assert Holder.decode(b"7:host:1:abc") == Holder("host:1:abc", 7)
