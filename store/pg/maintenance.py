"""What ``tick()`` asks of Postgres, and retention."""

from __future__ import annotations

from datetime import datetime

from store.models import Approval, DueNotification
from store.pg.base import PgBase
from store.queries import maintenance as q
from store.rows import approval_from_row
from store.rules import UNSENT


class PgMaintenance(PgBase):
    def mark_tick(self, at: datetime) -> None:
        self.db.execute(q.MARK_TICK, {"at": at})

    def last_tick(self) -> datetime | None:
        row = self.db.first(q.LAST_TICK)
        return None if row is None else row["finished_at"]

    def claim_due_notifications(
        self, limit: int, backoff_base: float, backoff_cap: float, now: datetime | None = None
    ) -> list[DueNotification]:
        params = {"limit": limit, "base": backoff_base, "cap": backoff_cap, "now": now}
        rows = self.db.rows(q.CLAIM_DUE_NOTIFICATIONS, params)
        return [DueNotification(approval_from_row(row), row["agent"]) for row in rows]

    def expired_approvals(self, limit: int, now: datetime | None = None) -> list[Approval]:
        rows = self.db.rows(q.EXPIRED_APPROVALS, {"limit": limit, "now": now})
        return [approval_from_row(row) for row in rows]

    def lapsed_claims(
        self, limit: int, reenqueue_seconds: float, now: datetime | None = None
    ) -> list[str]:
        params = {"limit": limit, "reenqueue": reenqueue_seconds, "now": now}
        return [str(row["id"]) for row in self.db.rows(q.LAPSED_CLAIMS, params)]

    def stale_claimable(
        self, limit: int, older_than_seconds: float, now: datetime | None = None
    ) -> list[str]:
        params = {"limit": limit, "older": older_than_seconds, "now": now}
        return [str(row["id"]) for row in self.db.rows(q.STALE_CLAIMABLE, params)]

    def free_key_heads(
        self, limit: int, older_than_seconds: float, now: datetime | None = None
    ) -> list[str]:
        params = {"limit": limit, "older": older_than_seconds, "now": now}
        return [str(row["id"]) for row in self.db.rows(q.FREE_KEY_HEADS, params)]

    def mark_enqueued(self, run_ids: list[str]) -> None:
        if run_ids:
            self.db.execute(q.MARK_ENQUEUED, {"run_ids": run_ids})

    def mark_unsent(self, run_ids: list[str]) -> None:
        if run_ids:
            self.db.execute(q.MARK_UNSENT, {"run_ids": run_ids, "unsent": UNSENT})

    def prune(self, older_than: datetime, batch: int = 500) -> int:
        total = 0
        while True:
            deleted = self.db.execute(q.PRUNE, {"cutoff": older_than, "batch": batch})
            total += deleted
            if deleted < batch:
                return total
