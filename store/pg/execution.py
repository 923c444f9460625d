"""Claims and the fenced writes of a running run, on Postgres.

W1 and W2 are one statement each (``store/queries/execution.py``); every other
fenced write locks the run row through the fence first.
"""

from __future__ import annotations

from typing import Any

from store.base import EffectBegin, check_run_id
from store.db import Tx, dumps
from store.errors import ConstraintViolation, InvalidTransition, LeaseLostError
from store.models import (
    Effect,
    EffectStatus,
    Fence,
    Outcome,
    RetryWait,
    Run,
    RunError,
    RunStatus,
    Settled,
    StepCommit,
    StepRecord,
)
from store.pg.base import PgBase, fence_params, outcome_params
from store.queries import Statement
from store.queries import execution as q
from store.rows import effect_from_row, run_from_row
from store.rules import (
    check_checkpoint,
    check_settle,
    commit_outcome,
    crashed_error,
    retry_outcome,
    with_state_step,
)


def _lost(fence: Fence) -> LeaseLostError:
    return LeaseLostError(f"run {fence.run_id} is no longer claimed by this execution")


def _step_json(step: StepRecord) -> dict[str, Any]:
    return {
        "kind": step.kind.value,
        "index": step.index,
        "name": step.name,
        "tool_call_id": step.tool_call_id,
        "input": step.input,
        "output": step.output,
        "error": step.error,
        "started_at": step.started_at,
        "finished_at": step.finished_at,
    }


class PgExecution(PgBase):
    # ---------------------------------------------------------------- claims

    def claim_run(
        self, run_id: str, owner: str, ttl_seconds: float, *, max_takeovers: int | None = None
    ) -> Run | Settled | None:
        run_id = check_run_id(run_id)
        params = {"run_id": run_id, "owner": owner, "ttl": ttl_seconds, "max": max_takeovers}
        try:
            row = self.db.first(q.CLAIM, params)
        except ConstraintViolation as exc:
            if exc.constraint == "runs_key_holder_idx":
                return None  # another run holds the concurrency key
            raise
        if row is not None:
            return run_from_row(row)
        if max_takeovers is not None and self._settle_crashed(run_id, max_takeovers):
            return self._after_settle(run_id, Outcome(RunStatus.FAILED))
        with self.db.tx() as tx:
            self._require_run(tx, run_id)
        return None

    def _settle_crashed(self, run_id: str, max_takeovers: int) -> bool:
        """The takeover the claim refused for the takeover limit (``q.CLAIM``):
        settle the run failed/crashed, once."""
        with self.db.tx() as tx:
            row = tx.first(q.LAPSED_RUN, {"run_id": run_id, "max": max_takeovers})
            if row is None:
                return False
            error = crashed_error(row["claim_epoch"], max_takeovers)
            tx.execute(
                q.SETTLE_CRASHED,
                {
                    "run_id": run_id,
                    "takeovers": row["takeovers"] + 1,
                    **outcome_params(Outcome(RunStatus.FAILED, error=error)),
                },
            )
            return True

    def renew(self, fence: Fence, ttl_seconds: float) -> bool:
        row = self.db.first(q.RENEW, {**fence_params(fence), "ttl": ttl_seconds})
        if row is None:
            raise _lost(fence)
        return bool(row["cancel_requested"])

    # --------------------------------------------------------- fenced writes

    def _lock_fenced(self, tx: Tx, fence: Fence) -> None:
        if tx.first(q.LOCK_FENCED, fence_params(fence)) is None:
            raise _lost(fence)

    def record_llm_step(self, fence: Fence, step: StepRecord) -> bool:
        usage = step.usage
        params = {
            **fence_params(fence),
            "index": step.index,
            "name": step.name,
            "input": dumps(step.input),
            "output": dumps(step.output),
            "error": dumps(step.error),
            "input_tokens": usage.input_tokens if usage else 0,
            "output_tokens": usage.output_tokens if usage else 0,
            "usage_estimated": bool(usage and usage.estimated),
            "cost_usd": step.cost_usd,
            "started_at": step.started_at,
            "finished_at": step.finished_at,
        }
        row = self.db.first(q.W1, params)
        assert row is not None  # the statement always returns its counts
        if not row["fenced"]:
            raise _lost(fence)
        return bool(row["applied"])

    def commit_step(self, fence: Fence, commit: StepCommit) -> Settled | None:
        outcome = commit_outcome(commit)
        approvals = [
            {
                "approval_id": a.approval_id,
                "tool_call_id": a.tool_call_id,
                "tool_name": a.tool_name,
                "input": a.input,
                "expires_at": a.expires_at,
                "on_expire": a.on_expire,
                "token_id": a.token_id,
                "next_notify_at": a.next_notify_at,
            }
            for a in commit.approvals
        ]
        wait_input = {"approval_ids": [a.approval_id for a in commit.approvals]}
        params: dict[str, Any] = {
            **fence_params(fence),
            **outcome_params(outcome),
            "step_index": commit.step_index,
            "base_count": commit.base_count,
            "message_count": commit.base_count + len(commit.new_messages),
            "finish_reason": commit.finish_reason,
            "messages": dumps(commit.new_messages),
            "steps": dumps([_step_json(s) for s in with_state_step(commit)]),
            "state_changed": commit.state_changed,
            "state": dumps(commit.state) if commit.state_changed else None,
            "approvals": dumps(approvals) if approvals else None,
            "wait_input": dumps(wait_input) if approvals else None,
        }
        with self.db.tx() as tx:
            if not self._w2(tx, fence, q.W2_WAIT if commit.approvals else q.W2, params):
                # Not an append: raise the rule's error, or replace stored messages.
                tx.rollback()
                stored = tx.first(q.CHECKPOINT_AT, {"run_id": fence.run_id})
                at = None if stored is None else (stored["step_index"], stored["message_count"])
                check_checkpoint(fence.run_id, at, commit)
                replace = q.W2_REPLACE_WAIT if commit.approvals else q.W2_REPLACE
                if not self._w2(tx, fence, replace, params):
                    raise AssertionError("W2 refused a checkpoint that the rule allows")
        return self._after_settle(fence.run_id, outcome)

    @staticmethod
    def _w2(tx: Tx, fence: Fence, statement: Statement, params: dict[str, Any]) -> bool:
        """Run one of W2's statements; whether it saved the checkpoint."""
        row = tx.first(statement, params)
        assert row is not None  # the statement always returns its counts
        if not row["fenced"]:
            raise _lost(fence)
        return bool(row["saved"])

    def settle(self, fence: Fence, outcome: Outcome) -> Settled:
        check_settle(outcome)
        if self.db.first(q.SETTLE, {**fence_params(fence), **outcome_params(outcome)}) is None:
            raise _lost(fence)
        settled = self._after_settle(fence.run_id, outcome)
        assert settled is not None
        return settled

    def defer_missing_agent(self, fence: Fence, grace_seconds: float) -> Run | None:
        params = {
            **fence_params(fence),
            **outcome_params(Outcome(RunStatus.INTERRUPTED)),
            "grace": grace_seconds,
        }
        with self.db.tx() as tx:
            deferred = tx.first(q.DEFER, params)
            if deferred is None and tx.first(q.FENCED, fence_params(fence)) is None:
                raise _lost(fence)
        return None if deferred is None else self.get_run(fence.run_id)

    # ---------------------------------------------------------------- effects

    def defer_retry(self, fence: Fence, wait: RetryWait, error: RunError | None = None) -> Settled:
        outcome = retry_outcome(wait, error)
        params = {
            **fence_params(fence),
            **outcome_params(outcome),
            "attempts": wait.attempts,
            "since": wait.since,
            "error": wait.error,
        }
        if self.db.first(q.DEFER_RETRY, params) is None:
            raise _lost(fence)
        settled = self._after_settle(fence.run_id, outcome)
        assert settled is not None
        return settled

    def begin_effect(
        self, fence: Fence, key: str, tool: str, input: object, *, rerun_started: bool
    ) -> EffectBegin:
        params = {**fence_params(fence), "key": key, "tool": tool, "input": dumps(input)}
        with self.db.tx() as tx:
            self._lock_fenced(tx, fence)
            row = tx.first(q.BEGIN_EFFECT, params)
            if row is not None:
                return EffectBegin(effect_from_row(row), execute=True)
            found = tx.first(q.EFFECT_FOR_KEY, params)
            assert found is not None  # the insert conflicted on this key
            existing = effect_from_row(found)
            if existing.status is EffectStatus.STARTED and existing.epoch == fence.epoch:
                return EffectBegin(existing, execute=True)  # our own retried write
            if existing.status is EffectStatus.STARTED and rerun_started:
                row = tx.first(q.RERUN_EFFECT, params)
                assert row is not None
                return EffectBegin(effect_from_row(row), execute=True)
            return EffectBegin(existing, execute=False)

    def finish_effect(
        self, fence: Fence, key: str, *, output: object = None, error: str | None = None
    ) -> Effect:
        status = EffectStatus.FAILED if error is not None else EffectStatus.COMPLETED
        params = {
            **fence_params(fence),
            "key": key,
            "status": status.value,
            "output": None if output is None else dumps(output),
            "error": error,
        }
        with self.db.tx() as tx:
            self._lock_fenced(tx, fence)
            row = tx.first(q.FINISH_EFFECT, params)
        if row is None:
            raise InvalidTransition(f"effect {key!r} was never started")
        return effect_from_row(row)
