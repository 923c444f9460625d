"""Cancel, approvals and decisions on Postgres: writes of processes other than
the run's owner. Each locks the run row first, then decides by ``store.rules``."""

from __future__ import annotations

from collections.abc import Sequence
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
from store.db import Tx, dumps
from store.errors import ApprovalNotFound
from store.models import Approval, Decision, Message, Outcome, RunError, RunStatus, Settled
from store.pg.base import PgBase, outcome_params
from store.queries import approvals as q
from store.queries import runs as qr
from store.rows import approval_from_row, run_from_row
from store.rules import CancelAction, cancel_action, cancel_outcome, check_fail_waiting


class PgApprovals(PgBase):
    def _lock_run(
        self, tx: Tx, run_id: str, now: datetime | None = None
    ) -> tuple[RunStatus, datetime]:
        row = tx.first(q.LOCK_RUN, {"run_id": run_id, "now": now})
        if row is None:
            self._require_run(tx, run_id)  # raises RunNotFound
        assert row is not None
        return RunStatus(row["status"]), row["now"]

    def _settle_by_id(self, tx: Tx, run_id: str, outcome: Outcome, *, cancel: bool) -> None:
        tx.execute(q.SETTLE_BY_ID, {"run_id": run_id, "cancel": cancel, **outcome_params(outcome)})
        tx.execute(q.WITHDRAW, {"run_id": run_id, "withdrawn": Decision.WITHDRAWN.value})

    def request_cancel(self, run_id: str) -> CancelResult:
        run_id = check_run_id(run_id)
        with self.db.tx() as tx:
            status, _ = self._lock_run(tx, run_id)
            action = cancel_action(status)
            if action is CancelAction.CANCELLED:
                self._settle_by_id(tx, run_id, cancel_outcome(), cancel=True)
            elif action is CancelAction.REQUESTED:
                tx.execute(q.REQUEST_CANCEL, {"run_id": run_id})
        if action is CancelAction.CANCELLED:
            settled = self._after_settle(run_id, cancel_outcome())
            assert settled is not None
            return CancelResult(settled.run, action, settled.next_in_key)
        return CancelResult(self.get_run(run_id), action)

    def fail_waiting(self, run_id: str, error: RunError) -> Settled:
        outcome = Outcome(RunStatus.FAILED, error=error)
        with self.db.tx() as tx:
            status, _ = self._lock_run(tx, run_id)
            check_fail_waiting(run_id, status)
            self._settle_by_id(tx, run_id, outcome, cancel=False)
        settled = self._after_settle(run_id, outcome)
        assert settled is not None
        return settled

    def approvals(self, run_id: str) -> list[Approval]:
        run_id = check_run_id(run_id)
        return [approval_from_row(r) for r in self.db.rows(q.RUN_APPROVALS, {"run_id": run_id})]

    def pending_approvals(self, limit: int = 50, agent: str | None = None) -> list[Approval]:
        rows = self.db.rows(q.PENDING_APPROVALS, {"limit": limit, "agent": agent})
        return [approval_from_row(r) for r in rows]

    def run_contexts(self, run_ids: Sequence[str]) -> dict[str, RunContext]:
        ids = list(dict.fromkeys(i for i in run_ids if is_canonical_id(i)))
        if not ids:
            return {}
        with self.db.tx() as tx:
            runs = [run_from_row(r) for r in tx.rows(qr.RUNS_BY_IDS, {"ids": ids})]
            messages = {
                str(r["run_id"]): r["messages"]
                for r in tx.rows(qr.CHECKPOINT_MESSAGES_BY_RUN_IDS, {"ids": ids})
            }
            approvals: dict[str, list[Approval]] = {}
            for row in tx.rows(q.APPROVALS_BY_RUN_IDS, {"ids": ids}):
                approval = approval_from_row(row)
                approvals.setdefault(approval.run_id, []).append(approval)
        return {
            run.id: RunContext(run, messages.get(run.id, []), approvals.get(run.id, []))
            for run in runs
        }

    def get_approval(self, approval_id: str) -> Approval:
        with self.db.tx() as tx:
            return self._approval(tx, approval_id, lock=False)

    def _approval(self, tx: Tx, approval_id: str, *, lock: bool) -> Approval:
        approval_id = check_approval_id(approval_id)
        row = tx.first(q.LOCK_APPROVAL if lock else q.APPROVAL, {"approval_id": approval_id})
        if row is None:
            raise ApprovalNotFound(f"no approval with id {approval_id!r}")
        return approval_from_row(row)

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
        with self.db.tx() as tx:
            # The run row first, then its approvals (the lock order everywhere).
            # An approval's run never changes, so reading it unlocked first is safe.
            run_id = self._approval(tx, approval_id, lock=False).run_id
            status, at = self._lock_run(tx, run_id, now)
            approval = self._approval(tx, approval_id, lock=True)
            check_decidable(approval, status, at, allow_expired)
            decided = approval_from_row(
                _one(
                    tx.first(
                        q.DECIDE,
                        {
                            "approval_id": approval_id,
                            "decision": decision.value,
                            "reason": reason,
                            "at": at,
                            "by": by,
                        },
                    )
                )
            )
            cp = _one(tx.first(q.LOCK_CHECKPOINT, {"run_id": run_id}))
            tx.execute(
                q.APPEND_MESSAGE,
                {
                    "run_id": run_id,
                    "seq": cp["message_count"],
                    "body": dumps(response),
                    "step_index": cp["step_index"],
                },
            )
            pending = _one(tx.first(q.PENDING, {"run_id": run_id}))["pending"]
            if pending == 0:
                tx.execute(
                    q.FINISH_WAIT,
                    {
                        "run_id": run_id,
                        "index": approval.step_index,
                        "at": at,
                        "output": dumps({"resumed": True}),
                    },
                )
                tx.execute(q.RESUME, {"run_id": run_id, "status": RunStatus.QUEUED.value, "at": at})
            run = self._get_run(tx, run_id)
        return DecisionResult(approval=decided, run=run, resumed=pending == 0)

    def record_notification(
        self, approval_id: str, *, accepted: bool, retry_at: datetime | None
    ) -> None:
        approval_id = check_approval_id(approval_id)
        params = {"approval_id": approval_id, "accepted": accepted, "retry_at": retry_at}
        if self.db.first(q.RECORD_NOTIFICATION, params) is None:
            raise ApprovalNotFound(f"no approval with id {approval_id!r}")

    def mark_notified(self, approval_ids: list[str]) -> None:
        if approval_ids:
            self.db.execute(q.MARK_NOTIFIED, {"approval_ids": approval_ids})


def _one(row: dict[str, object] | None) -> dict[str, object]:
    assert row is not None  # the row was locked earlier in this transaction
    return row
