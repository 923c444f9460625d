"""The engine's store, waking the readers of a run after each write that
committed events of it (runner/events/feed.py).

A wrapper rather than calls sprinkled over the engine: every process that
writes (workers, ``tick()``, the web process that starts runs and decides
approvals) goes through the engine's store, so none of them can forget.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from store.base import CancelResult, DecisionResult, RetryResult, Store
from store.models import (
    Decision,
    Fence,
    Message,
    NewRun,
    Outcome,
    RetryWait,
    Run,
    RunError,
    Settled,
    StepCommit,
    StepRecord,
)
from store.rules import CancelAction

if TYPE_CHECKING:
    from runner.events.feed import Feed


class LiveStore:
    """``store`` with a wake-up on ``feed`` after each write that made events.
    Reads (and anything not listed here) go straight to ``store``."""

    def __init__(self, store: Store, feed: Feed) -> None:
        self._store = store
        self._feed = feed

    @classmethod
    def wrap(cls, store: Store, feed: Feed) -> Store:
        return cast(Store, cls(store, feed))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def create_run(self, new: NewRun) -> tuple[Run, bool]:
        run, created = self._store.create_run(new)
        if created:
            self._feed.wake(run.id)
        return run, created

    def claim_run(
        self, run_id: str, owner: str, ttl_seconds: float, *, max_takeovers: int | None = None
    ) -> Run | Settled | None:
        claimed = self._store.claim_run(run_id, owner, ttl_seconds, max_takeovers=max_takeovers)
        if claimed is not None:
            self._feed.wake(run_id)
        return claimed

    def record_llm_step(self, fence: Fence, step: StepRecord) -> bool:
        recorded = self._store.record_llm_step(fence, step)
        if recorded:
            self._feed.wake(fence.run_id)
        return recorded

    def commit_step(self, fence: Fence, commit: StepCommit) -> Settled | None:
        settled = self._store.commit_step(fence, commit)
        self._feed.wake(fence.run_id)
        return settled

    def settle(self, fence: Fence, outcome: Outcome) -> Settled:
        settled = self._store.settle(fence, outcome)
        self._feed.wake(fence.run_id)
        return settled

    def defer_missing_agent(self, fence: Fence, grace_seconds: float) -> Run | None:
        deferred = self._store.defer_missing_agent(fence, grace_seconds)
        if deferred is not None:
            self._feed.wake(fence.run_id)
        return deferred

    def defer_retry(self, fence: Fence, wait: RetryWait, error: RunError | None = None) -> Settled:
        settled = self._store.defer_retry(fence, wait, error)
        self._feed.wake(fence.run_id)
        return settled

    def request_cancel(self, run_id: str) -> CancelResult:
        result = self._store.request_cancel(run_id)
        if result.action is CancelAction.CANCELLED:
            self._feed.wake(result.run.id)
        return result

    def retry_run(self, run_id: str, extra_steps: int = 0) -> RetryResult:
        result = self._store.retry_run(run_id, extra_steps)
        if result.retried:
            self._feed.wake(result.run.id)
        return result

    def fork_run(
        self,
        run_id: str,
        at_step: int,
        new: NewRun,
        *,
        model: str | None,
        rerun_effects: bool = False,
    ) -> Run:
        run = self._store.fork_run(run_id, at_step, new, model=model, rerun_effects=rerun_effects)
        self._feed.wake(run.id)
        return run

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
        result = self._store.decide(
            approval_id, decision, reason, response, allow_expired=allow_expired, now=now, by=by
        )
        self._feed.wake(result.run.id)
        return result

    def fail_waiting(self, run_id: str, error: RunError) -> Settled:
        settled = self._store.fail_waiting(run_id, error)
        self._feed.wake(run_id)
        return settled
