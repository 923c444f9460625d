"""An in-memory store with the same semantics as ``PostgresStore``.

For fast unit tests and for measuring the engine without a database. It is
thread-safe within one process and shares nothing across processes.
"""

from __future__ import annotations

import copy
import itertools
import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from store.base import (
    CancelResult,
    DecisionResult,
    EffectBegin,
    StartPoint,
    ThreadStart,
    check_approval_id,
    check_decidable,
    check_payload,
    check_run_id,
    crashed_error,
    takeover_crashes,
)
from store.config import DEFAULT_MAX_PAYLOAD_BYTES
from store.errors import (
    ApprovalNotFound,
    CheckpointConflict,
    InvalidTransition,
    LeaseLostError,
    RunNotFound,
)
from store.models import (
    CLAIMABLE,
    KEY_HOLDING,
    Approval,
    Checkpoint,
    Claim,
    Decision,
    DueNotification,
    Effect,
    EffectStatus,
    Fence,
    Message,
    NewRun,
    Outcome,
    Run,
    RunError,
    RunStatus,
    Settled,
    Step,
    StepCommit,
    StepKind,
    StepRecord,
    Usage,
    utcnow,
)


class MemoryStore:
    def __init__(
        self,
        *,
        clock: Callable[[], datetime] = utcnow,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    ) -> None:
        self.clock = clock
        self.max_payload_bytes = max_payload_bytes
        self._lock = threading.RLock()
        self._runs: dict[str, Run] = {}
        self._steps: dict[str, list[Step]] = {}
        self._messages: dict[str, list[Message]] = {}
        self._checkpoints: dict[str, tuple[int, int, str | None, datetime]] = {}
        self._effects: dict[tuple[str, str], Effect] = {}
        self._approvals: dict[str, Approval] = {}
        self._step_ids = itertools.count(1)
        # The epoch survives settling (which clears the claim): it only ever rises.
        self._epochs: dict[str, int] = {}
        # Takeovers since the last W1/W2 (see ``takeover_crashes``).
        self._takeovers: dict[str, int] = {}
        self._agent_missing_since: dict[str, datetime] = {}

    def close(self) -> None:
        pass

    def _now(self, now: datetime | None = None) -> datetime:
        return now or self.clock()

    # ------------------------------------------------------------------ runs

    def create_run(self, new: NewRun) -> tuple[Run, bool]:
        check_payload(new, self.max_payload_bytes)
        with self._lock:
            for run in self._runs.values():
                if run.agent == new.agent and run.trigger.id == new.trigger.id:
                    return self._with_wait(run), False
            now = self._now()
            run = Run(
                id=new.id,
                agent=new.agent,
                status=RunStatus.QUEUED,
                trigger=new.trigger,
                usage=Usage(),
                created_at=now,
                updated_at=now,
                concurrency_key=new.concurrency_key,
                thread=new.thread,
                enqueued_at=now,
            )
            self._runs[run.id] = run
            self._steps[run.id] = []
            self._messages[run.id] = []
            return run, True

    def _run(self, run_id: str) -> Run:
        run = self._runs.get(check_run_id(run_id))
        if run is None:
            raise RunNotFound(f"no run with id {run_id!r}")
        return run

    def _with_wait(self, run: Run) -> Run:
        if run.status is not RunStatus.WAITING:
            return replace(run, waiting=None)
        pending = [a for a in self._run_approvals(run.id) if a.pending]
        return replace(run, waiting=pending[0].wait_point() if pending else None)

    def get_run(self, run_id: str) -> Run:
        with self._lock:
            return self._with_wait(self._run(run_id))

    def list_runs(
        self,
        *,
        status: RunStatus | None = None,
        agent: str | None = None,
        thread: str | None = None,
        limit: int = 50,
    ) -> list[Run]:
        with self._lock:
            runs = [
                self._with_wait(r)
                for r in sorted(self._runs.values(), key=lambda r: r.id, reverse=True)
                if (status is None or r.status is status)
                and (agent is None or r.agent == agent)
                and (thread is None or r.thread == thread)
            ]
            return runs[:limit]

    def steps(self, run_id: str) -> list[Step]:
        with self._lock:
            self._run(run_id)
            return sorted(self._steps[run_id], key=lambda s: (s.index, s.id))

    def llm_step(self, run_id: str, index: int) -> Step | None:
        with self._lock:
            for step in self._steps.get(run_id, []):
                if step.kind is StepKind.LLM and step.index == index:
                    return step
            return None

    def checkpoint(self, run_id: str) -> Checkpoint | None:
        with self._lock:
            self._run(run_id)
            return self._checkpoint(run_id)

    def _checkpoint(self, run_id: str) -> Checkpoint | None:
        stored = self._checkpoints.get(run_id)
        if stored is None:
            return None
        index, count, finish_reason, created_at = stored
        return Checkpoint(
            run_id=run_id,
            step_index=index,
            messages=copy.deepcopy(self._messages[run_id][:count]),
            created_at=created_at,
            finish_reason=finish_reason,
        )

    def effect(self, run_id: str, key: str) -> Effect | None:
        with self._lock:
            return self._effects.get((run_id, key))

    def thread_start(self, thread: str, before_run_id: str) -> ThreadStart | None:
        with self._lock:
            earlier = [
                r
                for r in self._runs.values()
                if r.thread == thread and r.id < before_run_id and r.settled
            ]
            if not earlier:
                return None
            last = max(earlier, key=lambda r: r.id)
            checkpoint = self._checkpoint(last.id)
            messages = checkpoint.messages if checkpoint else []
            return ThreadStart(run_id=last.id, messages=messages, state=copy.deepcopy(last.state))

    # ---------------------------------------------------------------- claims

    def claim(
        self, run_id: str, owner: str, ttl_seconds: float, *, max_takeovers: int | None = None
    ) -> Claim | None:
        run = self.claim_run(run_id, owner, ttl_seconds, max_takeovers=max_takeovers)
        return run.claim if isinstance(run, Run) else None

    def start_point(self, run_id: str) -> StartPoint:
        with self._lock:
            checkpoint = self._checkpoint(run_id)
            index = checkpoint.step_index if checkpoint else 0
            return StartPoint(checkpoint, self.llm_step(run_id, index + 1))

    def claim_run(
        self, run_id: str, owner: str, ttl_seconds: float, *, max_takeovers: int | None = None
    ) -> Run | Settled | None:
        with self._lock:
            run = self._run(run_id)
            now = self._now()
            expired = (
                run.status is RunStatus.RUNNING
                and run.claim is not None
                and run.claim.expires_at < now
            )
            if run.status not in CLAIMABLE and not expired:
                return None
            takeovers = self._takeovers.get(run.id, 0)
            if expired:
                assert run.claim is not None
                if takeover_crashes(takeovers, max_takeovers):
                    assert max_takeovers is not None
                    self._takeovers[run.id] = takeovers + 1
                    error = crashed_error(run.claim.epoch, max_takeovers)
                    return self._apply_outcome(run.id, Outcome(RunStatus.FAILED, error=error))
                takeovers += 1
            if run.concurrency_key and run.status is RunStatus.QUEUED:
                for other in self._runs.values():
                    if other.id == run.id or other.concurrency_key != run.concurrency_key:
                        continue
                    if other.status in KEY_HOLDING:
                        return None
                    if other.status is RunStatus.QUEUED and other.id < run.id:
                        return None
            epoch = self._epochs.get(run.id, 0) + 1
            claim = Claim(owner=owner, expires_at=now + timedelta(seconds=ttl_seconds), epoch=epoch)
            self._epochs[run.id] = epoch
            self._takeovers[run.id] = takeovers
            self._runs[run.id] = replace(
                run,
                status=RunStatus.RUNNING,
                claim=claim,
                started_at=run.started_at or now,
                updated_at=now,
            )
            return self._runs[run.id]

    def renew(self, fence: Fence, ttl_seconds: float) -> bool:
        with self._lock:
            run = self._fenced(fence)
            assert run.claim is not None
            expires_at = self._now() + timedelta(seconds=ttl_seconds)
            self._runs[run.id] = replace(run, claim=replace(run.claim, expires_at=expires_at))
            return run.cancel_requested

    def _fenced(self, fence: Fence) -> Run:
        run = self._runs.get(fence.run_id)
        if (
            run is None
            or run.status is not RunStatus.RUNNING
            or run.claim is None
            or run.claim.owner != fence.owner
            or run.claim.epoch != fence.epoch
        ):
            raise LeaseLostError(f"run {fence.run_id} is no longer claimed by this execution")
        return run

    # --------------------------------------------------------- fenced writes

    def _add_step(self, run_id: str, record: StepRecord) -> None:
        self._steps[run_id].append(
            Step(
                run_id=run_id,
                id=next(self._step_ids),
                index=record.index,
                kind=record.kind,
                started_at=record.started_at,
                finished_at=record.finished_at,
                name=record.name,
                tool_call_id=record.tool_call_id,
                input=copy.deepcopy(record.input),
                output=copy.deepcopy(record.output),
                error=copy.deepcopy(record.error),
                usage=record.usage,
            )
        )

    def record_llm_step(self, fence: Fence, step: StepRecord) -> bool:
        with self._lock:
            run = self._fenced(fence)
            if self.llm_step(run.id, step.index) is not None:
                return False
            self._add_step(run.id, step)
            self._takeovers[run.id] = 0
            self._runs[run.id] = replace(
                run,
                usage=run.usage + (step.usage or Usage()),
                steps_used=max(run.steps_used, step.index),
                updated_at=self._now(),
            )
            return True

    def commit_step(self, fence: Fence, commit: StepCommit) -> Settled | None:
        with self._lock:
            run = self._fenced(fence)
            self._write_checkpoint(run.id, commit)
            self._takeovers[run.id] = 0
            for record in commit.tool_steps:
                if not any(
                    s.kind is StepKind.TOOL
                    and s.index == record.index
                    and s.tool_call_id == record.tool_call_id
                    for s in self._steps[run.id]
                ):
                    self._add_step(run.id, record)
            run = self._runs[run.id]
            if commit.state_changed:
                run = replace(run, state=copy.deepcopy(commit.state))
            outcome = commit.outcome
            if commit.approvals:
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
                outcome = Outcome(RunStatus.WAITING)
            self._runs[run.id] = replace(run, updated_at=self._now())
            if outcome is None:
                return None
            return self._apply_outcome(run.id, outcome)

    def _write_checkpoint(self, run_id: str, commit: StepCommit) -> None:
        stored = self._checkpoints.get(run_id)
        stored_index = stored[0] if stored else 0
        stored_count = stored[1] if stored else 0
        if stored is not None and commit.step_index < stored_index:
            raise CheckpointConflict(
                f"run {run_id} already has a checkpoint at step {stored_index}; "
                f"refusing step {commit.step_index}"
            )
        if commit.base_count > stored_count:
            raise CheckpointConflict(
                f"run {run_id} has {stored_count} messages; cannot extend from {commit.base_count}"
            )
        log = self._messages[run_id]
        del log[commit.base_count :]
        log.extend(copy.deepcopy(commit.new_messages))
        self._checkpoints[run_id] = (
            commit.step_index,
            len(log),
            commit.finish_reason,
            self._now(),
        )

    def _apply_outcome(self, run_id: str, outcome: Outcome) -> Settled:
        run = self._runs[run_id]
        now = self._now()
        changes: dict[str, Any] = {"status": outcome.status, "claim": None, "updated_at": now}
        if outcome.status.settled:
            changes.update(
                finished_at=now, output=copy.deepcopy(outcome.output), error=outcome.error
            )
        if outcome.status is RunStatus.INTERRUPTED:
            changes["enqueued_at"] = now
        self._runs[run_id] = replace(run, **changes)
        next_id = None
        if run.concurrency_key and outcome.status not in KEY_HOLDING:
            next_id = self._next_in_key(run.concurrency_key)
        return Settled(run=self._with_wait(self._runs[run_id]), next_in_key=next_id)

    def settle(self, fence: Fence, outcome: Outcome) -> Settled:
        if outcome.status in (RunStatus.RUNNING, RunStatus.QUEUED):
            raise InvalidTransition(f"a running run cannot settle as {outcome.status.value}")
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

    # ------------------------------------------------------- other processes

    def request_cancel(self, run_id: str) -> CancelResult:
        with self._lock:
            run = self._run(run_id)
            if run.status in (RunStatus.QUEUED, RunStatus.WAITING, RunStatus.INTERRUPTED):
                self._runs[run.id] = replace(run, cancel_requested=True)
                self._withdraw(run.id)
                settled = self._apply_outcome(
                    run.id,
                    Outcome(
                        RunStatus.CANCELLED, error=RunError("cancelled", "cancelled on request")
                    ),
                )
                return CancelResult(settled.run, "cancelled", settled.next_in_key)
            if run.status is RunStatus.RUNNING:
                self._runs[run.id] = replace(run, cancel_requested=True, updated_at=self._now())
                return CancelResult(self._with_wait(self._runs[run.id]), "requested")
            return CancelResult(self._with_wait(run), "settled")

    def _withdraw(self, run_id: str) -> None:
        for approval in self._run_approvals(run_id):
            if approval.pending:
                self._approvals[approval.approval_id] = replace(
                    approval, decision=Decision.WITHDRAWN, decided_at=self._now()
                )

    def _run_approvals(self, run_id: str) -> list[Approval]:
        return sorted(
            (a for a in self._approvals.values() if a.run_id == run_id),
            key=lambda a: (a.created_at, a.approval_id),
        )

    def approvals(self, run_id: str) -> list[Approval]:
        with self._lock:
            return self._run_approvals(check_run_id(run_id))

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
    ) -> DecisionResult:
        with self._lock:
            approval = self.get_approval(approval_id)
            run = self._runs[approval.run_id]
            at = self._now(now)
            check_decidable(approval, run.status, at, allow_expired)
            approval = replace(approval, decision=decision, reason=reason, decided_at=at)
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

    def fail_waiting(self, run_id: str, error: RunError) -> Settled:
        with self._lock:
            run = self._run(run_id)
            if run.status is not RunStatus.WAITING:
                raise InvalidTransition(f"run {run_id} is {run.status.value}, not waiting")
            self._withdraw(run_id)
            return self._apply_outcome(run_id, Outcome(RunStatus.FAILED, error=error))

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
                approval = self.get_approval(approval_id)
                self._approvals[approval_id] = replace(approval, notified_at=self._now())

    # ------------------------------------------------------------------ tick

    def claim_due_notifications(
        self, limit: int, backoff_base: float, backoff_cap: float, now: datetime | None = None
    ) -> list[DueNotification]:
        with self._lock:
            at = self._now(now)
            due = sorted(
                (
                    a
                    for a in self._approvals.values()
                    if a.pending
                    and a.notified_at is None
                    and a.next_notify_at is not None
                    and a.next_notify_at <= at
                    and self._runs[a.run_id].status is RunStatus.WAITING
                ),
                key=lambda a: a.next_notify_at or at,
            )[:limit]
            claimed = []
            for approval in due:
                delay = min(backoff_cap, backoff_base * 2**approval.attempts)
                approval = replace(
                    approval,
                    attempts=approval.attempts + 1,
                    next_notify_at=at + timedelta(seconds=delay),
                )
                self._approvals[approval.approval_id] = approval
                claimed.append(DueNotification(approval, self._runs[approval.run_id].agent))
            return claimed

    def expired_approvals(self, limit: int, now: datetime | None = None) -> list[Approval]:
        with self._lock:
            at = self._now(now)
            return sorted(
                (
                    a
                    for a in self._approvals.values()
                    if a.pending
                    and a.expires_at <= at
                    and self._runs[a.run_id].status is RunStatus.WAITING
                ),
                key=lambda a: a.expires_at,
            )[:limit]

    def lapsed_claims(
        self, limit: int, reenqueue_seconds: float, now: datetime | None = None
    ) -> list[str]:
        with self._lock:
            at = self._now(now)
            found = []
            for run in sorted(self._runs.values(), key=lambda r: r.id):
                if run.status is not RunStatus.RUNNING or run.claim is None:
                    continue
                if run.claim.expires_at >= at:
                    continue
                enq = run.enqueued_at
                if (
                    enq is None
                    or enq < run.claim.expires_at
                    or enq < at - timedelta(seconds=reenqueue_seconds)
                ):
                    found.append(run.id)
            return found[:limit]

    def stale_claimable(
        self, limit: int, older_than_seconds: float, now: datetime | None = None
    ) -> list[str]:
        with self._lock:
            cutoff = self._now(now) - timedelta(seconds=older_than_seconds)
            stale = sorted(
                (
                    r
                    for r in self._runs.values()
                    if r.status in CLAIMABLE
                    and r.enqueued_at is not None
                    and r.enqueued_at < cutoff
                    and (r.status is RunStatus.INTERRUPTED or r.concurrency_key is None)
                ),
                key=lambda r: r.enqueued_at or cutoff,
            )[:limit]
            ids = [r.id for r in stale]
            self._mark_enqueued(ids, self._now(now))
            return ids

    def free_key_heads(
        self, limit: int, older_than_seconds: float, now: datetime | None = None
    ) -> list[str]:
        with self._lock:
            cutoff = self._now(now) - timedelta(seconds=older_than_seconds)
            keys = sorted(
                {
                    r.concurrency_key
                    for r in self._runs.values()
                    if r.status is RunStatus.QUEUED and r.concurrency_key
                }
            )
            heads = []
            for key in keys:
                head = self._next_in_key(key)
                if head is not None:
                    run = self._runs[head]
                    if run.enqueued_at is not None and run.enqueued_at < cutoff:
                        heads.append(head)
            heads = heads[:limit]
            self._mark_enqueued(heads, self._now(now))
            return heads

    def _next_in_key(self, key: str) -> str | None:
        same = [r for r in self._runs.values() if r.concurrency_key == key]
        if any(r.status in KEY_HOLDING for r in same):
            return None
        queued = sorted(r.id for r in same if r.status is RunStatus.QUEUED)
        return queued[0] if queued else None

    def next_in_key(self, key: str) -> str | None:
        with self._lock:
            return self._next_in_key(key)

    def mark_enqueued(self, run_ids: list[str]) -> None:
        with self._lock:
            self._mark_enqueued(run_ids, self._now())

    def _mark_enqueued(self, run_ids: list[str], at: datetime) -> None:
        for run_id in run_ids:
            self._runs[run_id] = replace(self._runs[run_id], enqueued_at=at)

    def prune(self, older_than: datetime, batch: int = 500) -> int:
        with self._lock:
            doomed = [
                r.id
                for r in self._runs.values()
                if r.settled and r.finished_at is not None and r.finished_at < older_than
            ]
            for run_id in doomed:
                del self._runs[run_id]
                self._steps.pop(run_id, None)
                self._messages.pop(run_id, None)
                self._checkpoints.pop(run_id, None)
                self._epochs.pop(run_id, None)
                for key in [k for k in self._effects if k[0] == run_id]:
                    del self._effects[key]
                for aid in [a for a, v in self._approvals.items() if v.run_id == run_id]:
                    del self._approvals[aid]
            return len(doomed)
