"""The fenced writes of a running run, in memory: W1, W2, settle, effects."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import timedelta

from store.base import EffectBegin
from store.errors import InvalidTransition
from store.mem.base import MemBase
from store.models import (
    Approval,
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
    StepKind,
    StepRecord,
    Usage,
)
from store.rules import check_settle, commit_outcome, retry_outcome, with_state_step


class MemExecution(MemBase):
    def renew(self, fence: Fence, ttl_seconds: float) -> bool:
        with self._lock:
            run = self._fenced(fence)
            assert run.claim is not None
            expires_at = self._now() + timedelta(seconds=ttl_seconds)
            self._runs[run.id] = replace(run, claim=replace(run.claim, expires_at=expires_at))
            return run.cancel_requested

    def record_llm_step(self, fence: Fence, step: StepRecord) -> bool:
        with self._lock:
            run = self._fenced(fence)
            if any(s.kind is StepKind.LLM and s.index == step.index for s in self._steps[run.id]):
                return False
            self._add_step(run.id, step)
            self._runs[run.id] = replace(
                run,
                takeovers=0,
                usage=run.usage + (step.usage or Usage()),
                cost_usd=run.cost_usd + (step.cost_usd or 0.0),
                steps_used=max(run.steps_used, step.index),
                retry=None,
                updated_at=self._now(),
            )
            return True

    def commit_step(self, fence: Fence, commit: StepCommit) -> Settled | None:
        with self._lock:
            run = self._fenced(fence)
            self._write_checkpoint(run.id, commit)
            run = replace(run, takeovers=0)
            for record in with_state_step(commit):
                self._add_step(run.id, record)
            now = self._now()
            for new in commit.approvals:
                self._approvals.setdefault(
                    new.approval_id,
                    Approval(
                        approval_id=new.approval_id,
                        run_id=run.id,
                        step_index=commit.step_index,
                        tool_call_id=new.tool_call_id,
                        tool_name=new.tool_name,
                        input=copy.deepcopy(new.input),
                        expires_at=new.expires_at,
                        on_expire=new.on_expire,
                        token_id=new.token_id,
                        created_at=now,
                        next_notify_at=new.next_notify_at,
                    ),
                )
            if commit.approvals:
                self._add_step(
                    run.id,
                    StepRecord(
                        index=commit.step_index,
                        kind=StepKind.WAIT,
                        started_at=now,
                        finished_at=None,
                        name="approval",
                        input={"approval_ids": [a.approval_id for a in commit.approvals]},
                    ),
                )
            if commit.state_changed:
                run = replace(run, state=copy.deepcopy(commit.state))
            self._runs[run.id] = replace(run, updated_at=now)
            outcome = commit_outcome(commit)
            return None if outcome is None else self._apply_outcome(run.id, outcome)

    def settle(self, fence: Fence, outcome: Outcome) -> Settled:
        check_settle(outcome)
        with self._lock:
            self._fenced(fence)
            return self._apply_outcome(fence.run_id, outcome)

    def defer_missing_agent(self, fence: Fence, grace_seconds: float) -> Run | None:
        with self._lock:
            self._fenced(fence)
            now = self._now()
            since = self._agent_missing_since.setdefault(fence.run_id, now)
            if now - since >= timedelta(seconds=grace_seconds):
                return None
            return self._apply_outcome(fence.run_id, Outcome(RunStatus.INTERRUPTED)).run

    def defer_retry(self, fence: Fence, wait: RetryWait, error: RunError | None = None) -> Settled:
        with self._lock:
            self._fenced(fence)
            return self._apply_outcome(fence.run_id, retry_outcome(wait, error), retry=wait)

    def begin_effect(
        self, fence: Fence, key: str, tool: str, input: object, *, rerun_started: bool
    ) -> EffectBegin:
        with self._lock:
            self._fenced(fence)
            existing = self._effects.get((fence.run_id, key))
            now = self._now()
            if existing is None:
                effect = Effect(
                    run_id=fence.run_id,
                    key=key,
                    tool=tool,
                    input=copy.deepcopy(input),
                    status=EffectStatus.STARTED,
                    started_at=now,
                    epoch=fence.epoch,
                )
                self._effects[(fence.run_id, key)] = effect
                return EffectBegin(effect, execute=True)
            if existing.status is EffectStatus.STARTED and existing.epoch == fence.epoch:
                return EffectBegin(existing, execute=True)  # our own retried write
            if existing.status is EffectStatus.STARTED and rerun_started:
                effect = replace(
                    existing, attempts=existing.attempts + 1, started_at=now, epoch=fence.epoch
                )
                self._effects[(fence.run_id, key)] = effect
                return EffectBegin(effect, execute=True)
            return EffectBegin(existing, execute=False)

    def finish_effect(
        self, fence: Fence, key: str, *, output: object = None, error: str | None = None
    ) -> Effect:
        with self._lock:
            self._fenced(fence)
            existing = self._effects.get((fence.run_id, key))
            if existing is None:
                raise InvalidTransition(f"effect {key!r} was never started")
            effect = replace(
                existing,
                status=EffectStatus.FAILED if error is not None else EffectStatus.COMPLETED,
                output=copy.deepcopy(output),
                error=error,
                finished_at=self._now(),
            )
            self._effects[(fence.run_id, key)] = effect
            return effect
