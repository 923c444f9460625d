"""Retry and fork in memory; the rules are ``store/recovery.py``'s."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import datetime

from store.base import RetryResult, check_payload, check_run_id
from store.errors import RanEffect
from store.mem.base import MemBase
from store.models import (
    EffectStatus,
    NewRun,
    Run,
    RunAttempt,
    RunStatus,
    Step,
    StepKind,
)
from store.recovery import (
    Requeue,
    attempt_of,
    check_existing_fork,
    check_extra_steps,
    check_fork_effects,
    check_fork_step,
    check_model,
    check_new_id,
    fork_finish_reason,
    fork_messages,
    fork_state,
    may_retry,
    reopens,
)


class MemRecovery(MemBase):
    def retry_run(self, run_id: str, extra_steps: int = 0) -> RetryResult:
        run_id = check_run_id(run_id)
        extra_steps = check_extra_steps(extra_steps)
        with self._lock:
            run = self._run(run_id)
            if not may_retry(run, extra_steps):
                return RetryResult(self._with_wait(run), retried=False)
            now = self._now()
            attempts = self._attempts.setdefault(run.id, [])
            attempts.append(attempt_of(run, len(attempts) + 1, extra_steps, now))
            self._reopen_approvals(run.id, now)
            reset = Requeue()
            self._agent_missing_since.pop(run.id, None)
            self._runs[run.id] = replace(
                run,
                status=RunStatus.QUEUED,
                output=reset.output,
                error=reset.error,
                started_at=reset.started_at,
                finished_at=reset.finished_at,
                cancel_requested=reset.cancel_requested,
                takeovers=reset.takeovers,
                retry=None,
                extra_steps=run.extra_steps + extra_steps,
                enqueued_at=now,
                updated_at=now,
            )
            return RetryResult(self._with_wait(self._runs[run.id]), retried=True)

    def _reopen_approvals(self, run_id: str, now: datetime) -> None:
        stored = self._checkpoints.get(run_id)
        if stored is None:
            return
        for approval in self._run_approvals(run_id):
            if approval.step_index == stored[0] and reopens(approval.decision):
                self._approvals[approval.approval_id] = replace(
                    approval,
                    decision=None,
                    reason=None,
                    decided_at=None,
                    decided_by=None,
                    expires_at=now + (approval.expires_at - approval.created_at),
                    created_at=now,
                    notified_at=None,
                    attempts=0,
                    next_notify_at=None if approval.next_notify_at is None else now,
                )

    def attempts(self, run_id: str) -> list[RunAttempt]:
        with self._lock:
            run = self._run(run_id)
            return list(self._attempts.get(run.id, []))

    def fork_run(
        self,
        run_id: str,
        at_step: int,
        new: NewRun,
        *,
        model: str | None,
        rerun_effects: bool = False,
    ) -> Run:
        run_id = check_run_id(run_id)
        check_payload(new, self.max_payload_bytes)
        model = check_model(model)
        check_new_id(new.id)
        with self._lock:
            for existing in self._runs.values():
                if existing.id == new.id or (
                    existing.agent == new.agent and existing.trigger.id == new.trigger.id
                ):
                    return check_existing_fork(self._with_wait(existing), run_id, at_step)
            original = self._run(run_id)
            stored = self._checkpoints.get(original.id)
            cp_step = None if stored is None else stored[0]
            at_step = check_fork_step(original.id, at_step, cp_step)
            assert stored is not None and cp_step is not None
            count = stored[1]
            bodies = self._messages[original.id][:count]
            written = self._message_steps.get(original.id, [])
            steps: list[int | None] = [
                written[i] if i < len(written) else None for i in range(count)
            ]
            history = list(zip(steps, bodies, strict=True))
            messages = fork_messages(original.id, at_step, cp_step, history)
            check_fork_effects(
                original.id,
                at_step,
                self._effects_after(original.id, at_step),
                rerun_effects=rerun_effects,
            )
            states = [
                s
                for s in self._steps[original.id]
                if s.kind is StepKind.STATE and s.index <= at_step
            ]
            newest = max(states, key=lambda s: s.id) if states else None
            state = fork_state(
                (newest is not None, newest.output if newest else None),
                at_step,
                cp_step,
                original.state,
            )
            llm = next(
                (
                    s
                    for s in self._steps[original.id]
                    if s.kind is StepKind.LLM and s.index == at_step
                ),
                None,
            )
            run = self._new_run(
                new,
                steps_used=at_step,
                state=copy.deepcopy(state),
                extra_steps=at_step,
                model=model,
                forked_from=original.id,
                forked_at_step=at_step,
            )
            self._runs[run.id] = run
            self._messages[run.id] = copy.deepcopy(messages)
            # Unknown step numbers (none recorded) stay unknown in the fork.
            known = [s for s in steps[: len(messages)] if s is not None]
            self._message_steps[run.id] = known if len(known) == len(messages) else []
            self._steps[run.id] = [
                self._copy_step(s, run.id) for s in sorted(states, key=lambda s: s.id)
            ]
            finish = fork_finish_reason(at_step, cp_step, stored[2], llm.output if llm else None)
            self._checkpoints[run.id] = (at_step, len(messages), finish, run.created_at)
            return run

    def _effects_after(self, run_id: str, at_step: int) -> list[RanEffect]:
        """As ``FORK_EFFECTS`` (store/queries/recovery.py) reads them."""
        ran = []
        for step in sorted(self._steps[run_id], key=lambda s: s.index):
            if step.kind is not StepKind.LLM or step.index <= at_step:
                continue
            message = step.output.get("message") if isinstance(step.output, dict) else None
            calls = message.get("tool_calls") if isinstance(message, dict) else None
            found = []
            for call in calls if isinstance(calls, list) else []:
                effect = self._effects.get((run_id, f"{run_id}:{call.get('id')}"))
                if effect is not None and effect.status is not EffectStatus.FAILED:
                    found.append(effect)
            for effect in sorted(found, key=lambda e: (e.started_at, e.key)):
                completed = effect.status is EffectStatus.COMPLETED
                ran.append(RanEffect(effect.tool, step.index, completed))
        return ran

    def _copy_step(self, step: Step, run_id: str) -> Step:
        return replace(
            step, run_id=run_id, id=next(self._step_ids), output=copy.deepcopy(step.output)
        )
