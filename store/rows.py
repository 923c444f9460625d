"""Mapping database rows (column name to value) to the store's records."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from store.events import EventType, RunEvent, step_event
from store.models import (
    Approval,
    BudgetBound,
    Claim,
    Decision,
    Effect,
    EffectOutcome,
    EffectStatus,
    Firing,
    FiringOutcome,
    Interruption,
    OnDeny,
    Overlap,
    RequestKind,
    RetryWait,
    Run,
    RunAttempt,
    RunError,
    RunStatus,
    Schedule,
    StandingApproval,
    Step,
    StepKind,
    TriggerEnvelope,
    Usage,
    WaitPoint,
    usage_estimated,
)
from store.sealing import PLAIN, Sealing


class _LeftOut(Sealing):
    """What a read of runs without their payloads opens them to: None."""

    def open(self, value: Any, table: str, column: str, *row: object) -> Any:
        return None


_LEFT_OUT = _LeftOut()

# The approval columns an approval event carries (store/events.py).
APPROVAL_EVENT_PAYLOADS = ("input", "arguments", "answer", "reason")


def run_from_row(
    row: Mapping[str, Any],
    waiting: WaitPoint | None = None,
    *,
    sealing: Sealing = PLAIN,
    payloads: bool = True,
) -> Run:
    """A runs row as a run; without ``payloads``, its trigger's payload, its
    output, its state and its wait's input are None, not read (nor opened)."""
    m = row
    run_id = str(m["id"])
    if not payloads:
        sealing = _LEFT_OUT
    claim = None
    if m["claim_owner"] is not None:
        claim = Claim(
            owner=m["claim_owner"], expires_at=m["claim_expires_at"], epoch=m["claim_epoch"]
        )
    error = None
    if m["error_code"] is not None:
        error = RunError(code=m["error_code"], message=m["error_message"] or "")
    if waiting is None and "w_approval_id" in m and m["w_approval_id"] is not None:
        waiting = WaitPoint(
            approval_id=str(m["w_approval_id"]),
            tool_name=m["w_tool_name"],
            input=sealing.open(m["w_input"], "approvals", "input", str(m["w_approval_id"])),
            expires_at=m["w_expires_at"],
            token_id=m["w_token_id"],
            notified_at=m["w_notified_at"],
            kind=m.get("w_kind") or RequestKind.APPROVAL.value,
        )
    return Run(
        id=run_id,
        agent=m["agent"],
        status=RunStatus(m["status"]),
        trigger=TriggerEnvelope.model_validate(sealing.trigger(m["trigger"], run_id, opening=True)),
        usage=Usage(int(m["input_tokens"]), int(m["output_tokens"]), bool(m["usage_estimated"])),
        created_at=m["created_at"],
        updated_at=m["updated_at"],
        concurrency_key=m["concurrency_key"],
        thread=m["thread"],
        output=sealing.open(m["output"], "runs", "output", run_id),
        error=error,
        waiting=waiting,
        claim=claim,
        cancel_requested=bool(m["cancel_requested"]),
        steps_used=int(m["steps_used"]),
        state=sealing.open(m["state"], "runs", "state", run_id),
        enqueued_at=m["enqueued_at"],
        started_at=m["started_at"],
        finished_at=m["finished_at"],
        takeovers=int(m["takeovers"]),
        cost_usd=float(m["cost_usd"]),
        cost_unpriced=bool(m.get("cost_unpriced", False)),
        trace_context=m["trace_context"],
        retry=retry_from_row(m),
        extra_steps=int(m["extra_steps"]),
        model=m["model"],
        forked_from=None if m["forked_from"] is None else str(m["forked_from"]),
        forked_at_step=m["forked_at_step"],
        needs_attention=bool(m.get("needs_attention", False)),
        cancelled_by=m.get("cancelled_by"),
        interrupted_reason=(
            None if m.get("interrupted_reason") is None else Interruption(m["interrupted_reason"])
        ),
        interrupted_by=m.get("interrupted_by"),
        agent_missing_since=m.get("agent_missing_since"),
        parent_id=None if m.get("parent_id") is None else str(m["parent_id"]),
        parent_call_id=m.get("parent_call_id"),
        detached=bool(m.get("detached", False)),
        budget_bounds=tuple(BudgetBound.from_json(b) for b in m.get("budget_bounds") or ()),
        ancestors=tuple(str(a) for a in m.get("ancestors") or ()),
        tenant=m.get("tenant"),
        priority=int(m.get("priority") or 0),
        parked_key=m.get("parked_key"),
        # A parked run may go at its retry_at (store/pg/flow.py).
        parked_until=None if m.get("parked_key") is None else m["retry_at"],
        version=m.get("version"),
        started_version=m.get("started_version"),
        erased_at=m.get("erased_at"),
        erased_by=m.get("erased_by"),
    )


def retry_from_row(m: Mapping[str, Any]) -> RetryWait | None:
    if not m["retry_attempts"]:
        return None
    return RetryWait(
        attempts=int(m["retry_attempts"]),
        since=m["retry_since"],
        error=m["retry_error"] or "",
        at=m["retry_at"],
    )


def attempt_from_row(m: Mapping[str, Any]) -> RunAttempt:
    error = None
    if m["error_code"] is not None:
        error = RunError(code=m["error_code"], message=m["error_message"] or "")
    return RunAttempt(
        attempt=int(m["attempt"]),
        status=RunStatus(m["status"]),
        error=error,
        steps_used=int(m["steps_used"]),
        usage=Usage(int(m["input_tokens"]), int(m["output_tokens"])),
        started_at=m["started_at"],
        finished_at=m["finished_at"],
        retried_at=m["retried_at"],
        extra_steps=int(m["extra_steps"]),
    )


def step_from_row(row: Mapping[str, Any], *, sealing: Sealing = PLAIN) -> Step:
    m = sealing.step(row, str(row["run_id"]), opening=True)
    usage = None
    if m["input_tokens"] is not None:
        usage = Usage(
            int(m["input_tokens"]), int(m["output_tokens"] or 0), usage_estimated(m["output"])
        )
    return Step(
        run_id=str(m["run_id"]),
        id=int(m["id"]),
        index=int(m["index"]),
        kind=StepKind(m["kind"]),
        started_at=m["started_at"],
        finished_at=m["finished_at"],
        name=m["name"],
        tool_call_id=m["tool_call_id"],
        input=m["input"],
        output=m["output"],
        error=m["error"],
        usage=usage,
        cost_usd=m.get("cost_usd"),
    )


def approval_from_row(row: Mapping[str, Any], *, sealing: Sealing = PLAIN) -> Approval:
    m = row
    approval_id = str(m["approval_id"])

    def opened(column: str) -> Any:
        return sealing.open(m.get(column), "approvals", column, approval_id)

    return Approval(
        approval_id=approval_id,
        run_id=str(m["run_id"]),
        step_index=int(m["step_index"]),
        tool_call_id=m["tool_call_id"],
        tool_name=m["tool_name"],
        input=opened("input"),
        expires_at=m["expires_at"],
        on_expire=m["on_expire"],
        token_id=m["token_id"],
        created_at=m["created_at"],
        next_notify_at=m["next_notify_at"],
        notified_at=m["notified_at"],
        attempts=int(m["attempts"]),
        decision=Decision(m["decision"]) if m["decision"] else None,
        reason=opened("reason"),
        decided_at=m["decided_at"],
        decided_by=m.get("decided_by"),
        kind=RequestKind(m.get("kind") or RequestKind.APPROVAL),
        schema=m.get("schema"),
        arguments=opened("arguments"),
        answer=opened("answer"),
        for_run=bool(m.get("for_run")),
        standing_from=None if m.get("standing_from") is None else str(m["standing_from"]),
        on_deny=OnDeny(m.get("on_deny") or OnDeny.CONTINUE),
        version=m.get("version"),
        tool_kind=m.get("tool_kind"),
        addressed_to=m.get("addressed_to"),
    )


def standing_from_row(row: Mapping[str, Any]) -> StandingApproval:
    return StandingApproval(
        run_id=str(row["run_id"]),
        tool_name=row["tool_name"],
        approval_id=str(row["approval_id"]),
        granted_by=row["granted_by"],
        granted_at=row["granted_at"],
    )


def effect_from_row(row: Mapping[str, Any], *, sealing: Sealing = PLAIN) -> Effect:
    m = row
    run_id = str(m["run_id"])
    return Effect(
        run_id=run_id,
        key=m["key"],
        tool=m["tool"],
        input=sealing.open(m["input"], "effects", "input", run_id, m["key"]),
        status=EffectStatus(m["status"]),
        started_at=m["started_at"],
        epoch=int(m["claim_epoch"]),
        attempts=int(m["attempts"]),
        output=sealing.open(m["output"], "effects", "output", run_id, m["key"]),
        error=m["error"],
        finished_at=m["finished_at"],
        resolved_outcome=None
        if m.get("resolved_outcome") is None
        else EffectOutcome(m["resolved_outcome"]),
        resolved_by=m.get("resolved_by"),
        resolved_note=m.get("resolved_note"),
        resolved_at=m.get("resolved_at"),
        version=m.get("version"),
    )


def event_from_row(row: Mapping[str, Any], *, sealing: Sealing = PLAIN) -> RunEvent:
    """A row of ``EVENTS_AFTER``: a steps row, or a run_events row."""
    if row["type"] == EventType.STEP.value:
        return step_event(step_from_row(row, sealing=sealing))
    data = dict(row["data"])
    if row["type"] == EventType.APPROVAL.value:
        # The approval's row, copied by a trigger: sealed as the row is.
        for column in APPROVAL_EVENT_PAYLOADS:
            if column in data:
                data[column] = sealing.open(
                    data[column], "approvals", column, str(data["approval_id"])
                )
    return RunEvent(
        run_id=str(row["run_id"]),
        type=EventType(row["type"]),
        data=data,
        id=int(row["id"]),
        at=row["at"],
    )


def schedule_from_row(row: Mapping[str, Any], *, sealing: Sealing = PLAIN) -> Schedule:
    m = row
    return Schedule(
        name=m["name"],
        agent=m["agent"],
        cron=m["cron"],
        timezone=m["timezone"],
        every_seconds=m["every_seconds"],
        payload=sealing.open(m["payload"], "schedules", "payload", m["name"]),
        thread=m["thread"],
        keys=dict(m["keys"] or {}),
        overlap=Overlap(m["overlap"]),
        catchup_window_seconds=float(m["catchup_window_seconds"]),
        jitter_seconds=float(m["jitter_seconds"]),
        priority=int(m.get("priority") or 0),
        paused=bool(m["paused"]),
        next_at=m["next_at"],
        next_due_at=m["next_due_at"],
        created_at=m["created_at"],
        updated_at=m["updated_at"],
    )


def firing_from_row(row: Mapping[str, Any]) -> Firing:
    m = row
    return Firing(
        schedule=m["schedule"],
        scheduled_at=m["scheduled_at"],
        outcome=FiringOutcome(m["outcome"]),
        fired_at=m["fired_at"],
        run_id=None if m["run_id"] is None else str(m["run_id"]),
        reason=m["reason"],
    )
