"""What ``tick()`` asks of the in-memory store, and retention."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from store.mem.base import MemBase
from store.models import CLAIMABLE, Approval, DueNotification, RunStatus
from store.rules import UNSENT


class MemMaintenance(MemBase):
    def mark_tick(self, at: datetime) -> None:
        with self._lock:
            self._last_tick = at

    def last_tick(self) -> datetime | None:
        with self._lock:
            return self._last_tick

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

    def mark_enqueued(self, run_ids: list[str]) -> None:
        with self._lock:
            self._mark_enqueued(run_ids, self._now())

    def mark_unsent(self, run_ids: list[str]) -> None:
        with self._lock:
            unsent = [r for r in run_ids if r in self._runs and self._runs[r].status in CLAIMABLE]
            self._mark_enqueued(unsent, UNSENT)

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
                self._events.pop(run_id, None)
                self._messages.pop(run_id, None)
                self._message_steps.pop(run_id, None)
                self._attempts.pop(run_id, None)
                self._checkpoints.pop(run_id, None)
                self._epochs.pop(run_id, None)
                for key in [k for k in self._effects if k[0] == run_id]:
                    del self._effects[key]
                for aid in [a for a, v in self._approvals.items() if v.run_id == run_id]:
                    del self._approvals[aid]
            return len(doomed)
