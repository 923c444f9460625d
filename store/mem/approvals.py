"""Cancel, approvals and decisions in memory."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from store.base import (
    CancelResult,
    DecisionResult,
    RunContext,
    check_approval_id,
    check_decidable,
    check_run_id,
    is_canonical_id,
)
from store.errors import ApprovalNotFound
from store.mem.base import MemBase
from store.models import (
    Approval,
    Decision,
    Message,
    Outcome,
    RunError,
    RunStatus,
    Settled,
    StepCommit,
    StepKind,
)
from store.rules import CancelAction, cancel_action, cancel_outcome, check_fail_waiting


class MemApprovals(MemBase):
    def request_cancel(self, run_id: str) -> CancelResult:
        with self._lock:
            run = self._run(run_id)
            action = cancel_action(run.status)
            if action is CancelAction.CANCELLED:
                self._withdraw(run.id)
                settled = self._apply_outcome(run.id, cancel_outcome(), cancel_requested=True)
                return CancelResult(settled.run, action, settled.next_in_key)
            if action is CancelAction.REQUESTED:
                self._runs[run.id] = replace(run, cancel_requested=True, updated_at=self._now())
            return CancelResult(self._with_wait(self._runs[run.id]), action)

    def fail_waiting(self, run_id: str, error: RunError) -> Settled:
        with self._lock:
            run = self._run(run_id)
            check_fail_waiting(run_id, run.status)
            self._withdraw(run_id)
            return self._apply_outcome(run_id, Outcome(RunStatus.FAILED, error=error))

    def _withdraw(self, run_id: str) -> None:
        for approval in self._run_approvals(run_id):
            if approval.pending:
                self._approvals[approval.approval_id] = replace(
                    approval, decision=Decision.WITHDRAWN, decided_at=self._now()
                )

    def approvals(self, run_id: str) -> list[Approval]:
        with self._lock:
            return self._run_approvals(check_run_id(run_id))

    def pending_approvals(self, limit: int = 50, agent: str | None = None) -> list[Approval]:
        with self._lock:
            pending = [
                a
                for a in self._approvals.values()
                if a.pending
                and self._runs[a.run_id].status is RunStatus.WAITING
                and agent in (None, self._runs[a.run_id].agent)
            ]
        return sorted(pending, key=lambda a: (a.created_at, a.approval_id))[:limit]

    def run_contexts(self, run_ids: Sequence[str]) -> dict[str, RunContext]:
        contexts: dict[str, RunContext] = {}
        with self._lock:
            for run_id in run_ids:
                run = self._runs.get(run_id) if is_canonical_id(run_id) else None
                if run is None:
                    continue
                checkpoint = self._checkpoint(run_id)
                messages = [] if checkpoint is None else checkpoint.messages
                approvals = self._run_approvals(run_id)
                contexts[run_id] = RunContext(self._with_wait(run), messages, approvals)
        return contexts

    def get_approval(self, approval_id: str) -> Approval:
        with self._lock:
            approval = self._approvals.get(check_approval_id(approval_id))
            if approval is None:
                raise ApprovalNotFound(f"no approval with id {approval_id!r}")
            return approval

    def decide(
        self,
        approval_id: str,
        decision: Decision,
        reason: str | None,
        response: Message,
        *,
        allow_expired: bool = False,
        now: datetime | None = None,
        by: str | None = None,
    ) -> DecisionResult:
        with self._lock:
            approval = self.get_approval(approval_id)
            run = self._runs[approval.run_id]
            at = self._now(now)
            check_decidable(approval, run.status, at, allow_expired)
            approval = replace(
                approval, decision=decision, reason=reason, decided_at=at, decided_by=by
            )
            self._approvals[approval_id] = approval
            index, count, finish_reason, _ = self._checkpoints[run.id]
            self._write_checkpoint(
                run.id,
                StepCommit(
                    step_index=index,
                    base_count=count,
                    new_messages=[response],
                    finish_reason=finish_reason,
                ),
            )
            resumed = not any(a.pending for a in self._run_approvals(run.id))
            if resumed:
                steps = self._steps[run.id]
                for i, step in enumerate(steps):
                    if step.kind is StepKind.WAIT and step.index == approval.step_index:
                        steps[i] = replace(step, finished_at=at, output={"resumed": True})
                self._runs[run.id] = replace(
                    run, status=RunStatus.QUEUED, enqueued_at=at, updated_at=self._now()
                )
            return DecisionResult(approval, self._with_wait(self._runs[run.id]), resumed)

    def record_notification(
        self, approval_id: str, *, accepted: bool, retry_at: datetime | None
    ) -> None:
        with self._lock:
            approval = self.get_approval(approval_id)
            if accepted:
                approval = replace(
                    approval, attempts=approval.attempts + 1, notified_at=self._now()
                )
            else:
                approval = replace(
                    approval, attempts=approval.attempts + 1, next_notify_at=retry_at
                )
            self._approvals[approval_id] = approval

    def mark_notified(self, approval_ids: list[str]) -> None:
        with self._lock:
            for approval_id in approval_ids:
                # Like the Postgres UPDATE: an approval pruned meanwhile is skipped.
                approval = self._approvals.get(approval_id)
                if approval is not None:
                    self._approvals[approval_id] = replace(approval, notified_at=self._now())
