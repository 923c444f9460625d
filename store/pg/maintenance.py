"""What ``tick()`` asks of Postgres, and retention. Each statement has a
partial index in ``store/schema.py``."""

from __future__ import annotations

from datetime import datetime

from store.models import Approval, DueNotification
from store.pg.base import PgBase
from store.rows import approval_from_row
from store.rules import UNSENT
from store.statements import Statement

CLAIM_DUE_NOTIFICATIONS = Statement(
    "claim_due_notifications",
    """
    UPDATE approvals AS a
       SET attempts = a.attempts + 1,
           next_notify_at = COALESCE(CAST(:now AS timestamptz), now()) + make_interval(
               secs => LEAST(CAST(:cap AS float8), CAST(:base AS float8) * power(2, a.attempts)))
      FROM runs AS r
     WHERE a.approval_id IN (
           SELECT approval_id FROM approvals
            WHERE decision IS NULL AND notified_at IS NULL
              AND next_notify_at <= COALESCE(CAST(:now AS timestamptz), now())
            ORDER BY next_notify_at
            LIMIT CAST(:limit AS int)
            FOR UPDATE SKIP LOCKED)
       AND r.id = a.run_id AND r.status = 'waiting'
    RETURNING a.*, r.agent
    """,
)

EXPIRED_APPROVALS = Statement(
    "expired_approvals",
    """
    SELECT a.* FROM approvals AS a JOIN runs AS r ON r.id = a.run_id
     WHERE a.decision IS NULL AND a.expires_at <= COALESCE(CAST(:now AS timestamptz), now())
       AND r.status = 'waiting'
     ORDER BY a.expires_at
     LIMIT CAST(:limit AS int)
    """,
)

LAPSED_CLAIMS = Statement(
    "lapsed_claims",
    """
    SELECT id FROM runs
     WHERE status = 'running' AND claim_expires_at < COALESCE(CAST(:now AS timestamptz), now())
       AND (enqueued_at IS NULL OR enqueued_at < claim_expires_at
            OR enqueued_at < COALESCE(CAST(:now AS timestamptz), now())
                             - make_interval(secs => CAST(:reenqueue AS float8)))
     ORDER BY claim_expires_at
     LIMIT CAST(:limit AS int)
    """,
)

STALE_CLAIMABLE = Statement(
    "stale_claimable",
    """
    UPDATE runs SET enqueued_at = COALESCE(CAST(:now AS timestamptz), now())
     WHERE id IN (
           SELECT id FROM runs
            WHERE status IN ('queued', 'interrupted')
              AND enqueued_at < COALESCE(CAST(:now AS timestamptz), now())
                                - make_interval(secs => CAST(:older AS float8))
              AND (status = 'interrupted' OR concurrency_key IS NULL)
            ORDER BY enqueued_at
            LIMIT CAST(:limit AS int)
            FOR UPDATE SKIP LOCKED)
    RETURNING id
    """,
)

FREE_KEY_HEADS = Statement(
    "free_key_heads",
    """
    WITH heads AS (
        SELECT DISTINCT ON (concurrency_key) id, concurrency_key, enqueued_at
          FROM runs
         WHERE status = 'queued' AND concurrency_key IS NOT NULL
         ORDER BY concurrency_key, arrival
    )
    UPDATE runs SET enqueued_at = COALESCE(CAST(:now AS timestamptz), now())
     WHERE id IN (
           SELECT h.id FROM heads AS h
            WHERE h.enqueued_at < COALESCE(CAST(:now AS timestamptz), now())
                                  - make_interval(secs => CAST(:older AS float8))
              AND NOT EXISTS (
                  SELECT 1 FROM runs AS x
                   WHERE x.concurrency_key = h.concurrency_key
                     AND x.status IN ('running', 'waiting', 'interrupted'))
            LIMIT CAST(:limit AS int))
    RETURNING id
    """,
)

MARK_ENQUEUED = Statement(
    "mark_enqueued",
    "UPDATE runs SET enqueued_at = now() WHERE id = ANY(CAST(:run_ids AS uuid[]))",
)

# A run whose message was never sent is "enqueued" at UNSENT, older than any
# re-enqueue window: the next tick() sends it (STALE_CLAIMABLE, FREE_KEY_HEADS).
# Only a queued or interrupted run: one a worker has claimed since is sent.
MARK_UNSENT = Statement(
    "mark_unsent",
    """
    UPDATE runs SET enqueued_at = CAST(:unsent AS timestamptz)
     WHERE id = ANY(CAST(:run_ids AS uuid[])) AND status IN ('queued', 'interrupted')
    """,
)

PRUNE = Statement(
    "prune",
    """
    DELETE FROM runs WHERE id IN (
        SELECT id FROM runs
         WHERE status IN ('completed', 'failed', 'cancelled')
           AND finished_at < CAST(:cutoff AS timestamptz)
         LIMIT CAST(:batch AS int))
    """,
)

# When tick() last finished: the one row of tick_mark (store/schema.py).
MARK_TICK = Statement(
    "mark_tick",
    """
    INSERT INTO tick_mark (id, finished_at) VALUES (1, CAST(:at AS timestamptz))
    ON CONFLICT (id) DO UPDATE SET finished_at = EXCLUDED.finished_at
    """,
)

LAST_TICK = Statement("last_tick", "SELECT finished_at FROM tick_mark WHERE id = 1")


class PgMaintenance(PgBase):
    def mark_tick(self, at: datetime) -> None:
        self.db.execute(MARK_TICK, {"at": at})

    def last_tick(self) -> datetime | None:
        row = self.db.first(LAST_TICK)
        return None if row is None else row["finished_at"]

    def claim_due_notifications(
        self, limit: int, backoff_base: float, backoff_cap: float, now: datetime | None = None
    ) -> list[DueNotification]:
        params = {"limit": limit, "base": backoff_base, "cap": backoff_cap, "now": now}
        rows = self.db.rows(CLAIM_DUE_NOTIFICATIONS, params)
        return [
            DueNotification(approval_from_row(row, sealing=self.sealing), row["agent"])
            for row in rows
        ]

    def expired_approvals(self, limit: int, now: datetime | None = None) -> list[Approval]:
        rows = self.db.rows(EXPIRED_APPROVALS, {"limit": limit, "now": now})
        return [approval_from_row(row, sealing=self.sealing) for row in rows]

    def lapsed_claims(
        self, limit: int, reenqueue_seconds: float, now: datetime | None = None
    ) -> list[str]:
        params = {"limit": limit, "reenqueue": reenqueue_seconds, "now": now}
        return [str(row["id"]) for row in self.db.rows(LAPSED_CLAIMS, params)]

    def stale_claimable(
        self, limit: int, older_than_seconds: float, now: datetime | None = None
    ) -> list[str]:
        params = {"limit": limit, "older": older_than_seconds, "now": now}
        return [str(row["id"]) for row in self.db.rows(STALE_CLAIMABLE, params)]

    def free_key_heads(
        self, limit: int, older_than_seconds: float, now: datetime | None = None
    ) -> list[str]:
        params = {"limit": limit, "older": older_than_seconds, "now": now}
        return [str(row["id"]) for row in self.db.rows(FREE_KEY_HEADS, params)]

    def mark_enqueued(self, run_ids: list[str]) -> None:
        if run_ids:
            self.db.execute(MARK_ENQUEUED, {"run_ids": run_ids})

    def mark_unsent(self, run_ids: list[str]) -> None:
        if run_ids:
            self.db.execute(MARK_UNSENT, {"run_ids": run_ids, "unsent": UNSENT})

    def prune(self, older_than: datetime, batch: int = 500) -> int:
        total = 0
        while True:
            deleted = self.db.execute(PRUNE, {"cutoff": older_than, "batch": batch})
            total += deleted
            if deleted < batch:
                return total
