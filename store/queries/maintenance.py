"""What ``tick()`` asks, and retention. Each has a partial index in ``store/schema.py``."""

from __future__ import annotations

from store.queries import Statement
from store.queries.fragments import NOW
from store.status import CLAIMABLE, KEY_HOLDING, SETTLED, RunStatus, lit, status_in

_WAITING = lit(RunStatus.WAITING)
_QUEUED = lit(RunStatus.QUEUED)

CLAIM_DUE_NOTIFICATIONS = Statement(
    "claim_due_notifications",
    f"""
    UPDATE approvals AS a
       SET attempts = a.attempts + 1,
           next_notify_at = {NOW} + make_interval(
               secs => LEAST(CAST(:cap AS float8), CAST(:base AS float8) * power(2, a.attempts)))
      FROM runs AS r
     WHERE a.approval_id IN (
           SELECT approval_id FROM approvals
            WHERE decision IS NULL AND notified_at IS NULL
              AND next_notify_at <= {NOW}
            ORDER BY next_notify_at
            LIMIT CAST(:limit AS int)
            FOR UPDATE SKIP LOCKED)
       AND r.id = a.run_id AND r.status = {_WAITING}
    RETURNING a.*, r.agent
    """,
)

EXPIRED_APPROVALS = Statement(
    "expired_approvals",
    f"""
    SELECT a.* FROM approvals AS a JOIN runs AS r ON r.id = a.run_id
     WHERE a.decision IS NULL AND a.expires_at <= {NOW} AND r.status = {_WAITING}
     ORDER BY a.expires_at
     LIMIT CAST(:limit AS int)
    """,
)

LAPSED_CLAIMS = Statement(
    "lapsed_claims",
    f"""
    SELECT id FROM runs
     WHERE status = {lit(RunStatus.RUNNING)} AND claim_expires_at < {NOW}
       AND (enqueued_at IS NULL OR enqueued_at < claim_expires_at
            OR enqueued_at < {NOW} - make_interval(secs => CAST(:reenqueue AS float8)))
     ORDER BY claim_expires_at
     LIMIT CAST(:limit AS int)
    """,
)

STALE_CLAIMABLE = Statement(
    "stale_claimable",
    f"""
    UPDATE runs SET enqueued_at = {NOW}
     WHERE id IN (
           SELECT id FROM runs
            WHERE {status_in(CLAIMABLE)}
              AND enqueued_at < {NOW} - make_interval(secs => CAST(:older AS float8))
              AND (status = {lit(RunStatus.INTERRUPTED)} OR concurrency_key IS NULL)
            ORDER BY enqueued_at
            LIMIT CAST(:limit AS int)
            FOR UPDATE SKIP LOCKED)
    RETURNING id
    """,
)

FREE_KEY_HEADS = Statement(
    "free_key_heads",
    f"""
    WITH heads AS (
        SELECT DISTINCT ON (concurrency_key) id, concurrency_key, enqueued_at
          FROM runs
         WHERE status = {_QUEUED} AND concurrency_key IS NOT NULL
         ORDER BY concurrency_key, id
    )
    UPDATE runs SET enqueued_at = {NOW}
     WHERE id IN (
           SELECT h.id FROM heads AS h
            WHERE h.enqueued_at < {NOW} - make_interval(secs => CAST(:older AS float8))
              AND NOT EXISTS (
                  SELECT 1 FROM runs AS x
                   WHERE x.concurrency_key = h.concurrency_key
                     AND {status_in(KEY_HOLDING, "x.status")})
            LIMIT CAST(:limit AS int))
    RETURNING id
    """,
)

# The key's oldest queued run, unless a run holds the key.
NEXT_IN_KEY = Statement(
    "next_in_key",
    f"""
    SELECT id FROM runs
     WHERE concurrency_key = CAST(:key AS text) AND status = {_QUEUED}
       AND NOT EXISTS (SELECT 1 FROM runs AS x
                        WHERE x.concurrency_key = CAST(:key AS text)
                          AND {status_in(KEY_HOLDING, "x.status")})
     ORDER BY id LIMIT 1
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
    f"""
    UPDATE runs SET enqueued_at = CAST(:unsent AS timestamptz)
     WHERE id = ANY(CAST(:run_ids AS uuid[])) AND {status_in(CLAIMABLE)}
    """,
)

PRUNE = Statement(
    "prune",
    f"""
    DELETE FROM runs WHERE id IN (
        SELECT id FROM runs
         WHERE {status_in(SETTLED)} AND finished_at < CAST(:cutoff AS timestamptz)
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
