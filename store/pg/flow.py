"""Flow control's part of the store: a run parked on a limit (a model's
requests or tokens, a concurrency key...) and the runs parked on each.

A run that cannot go soon is parked: it goes back to the queue, holding no
claim and no worker, not claimable before the time it may go, and it is sent
again at that time (tick() re-enqueues it after, as a run waiting to retry).
``runs.parked_key`` says on what; it is set only while the run is parked (the
claim and a cancel clear it).
"""

from __future__ import annotations

from datetime import datetime

from store.models import Ended, Fence, ParkedKey
from store.pg.base import fence_params, outcome_params
from store.pg.execution import PgExecution, lost_lease
from store.rules import park_outcome
from store.statements import Statement
from store.validate import check_limit_key, is_canonical_id

# The park: the outcome of a run waiting to retry (queued, the claim and any
# reservation released, enqueued at the time it may go: tick()'s re-enqueue
# finds it RUNWRIGHT_REENQUEUE_SECONDS after that), not claimable before
# retry_at (CLAIM), and the limit it waits on. A durable retry's attempts stay
# as they are: parking is admission, not a failed attempt.
PARK = Statement(
    "park",
    """
    UPDATE runs SET
        status = COALESCE(CAST(:o_status AS text), status),
        claim_owner = CASE WHEN CAST(:o_status AS text) IS NULL THEN claim_owner END,
        claim_expires_at = CASE WHEN CAST(:o_status AS text) IS NULL
                                THEN claim_expires_at END,
        finished_at = CASE WHEN CAST(:o_ended AS bool) THEN now() ELSE finished_at END,
        output = CASE WHEN CAST(:o_ended AS bool) THEN CAST(:o_output AS json)
                      ELSE output END,
        error_code = CASE WHEN CAST(:o_ended AS bool) THEN CAST(:o_code AS text)
                          ELSE error_code END,
        error_message = CASE WHEN CAST(:o_ended AS bool) THEN CAST(:o_message AS text)
                             ELSE error_message END,
        enqueued_at = CASE WHEN CAST(:o_requeue AS bool)
                           THEN COALESCE(CAST(:o_requeue_at AS timestamptz), now())
                           ELSE enqueued_at END,
        interrupted_reason = CASE WHEN CAST(:o_status AS text) IS NULL
                                  THEN interrupted_reason
                                  ELSE CAST(:o_interruption AS text) END,
        interrupted_by = CASE WHEN CAST(:o_status AS text) IS NULL THEN interrupted_by
                              WHEN CAST(:o_interruption AS text) IS NOT NULL
                              THEN claim_owner END,
        reserved_tokens = CASE WHEN CAST(:o_status AS text) IS NULL THEN reserved_tokens
                               ELSE 0 END,
        updated_at = now(),
        retry_at = CAST(:o_requeue_at AS timestamptz),
        parked_key = CAST(:key AS text)
     WHERE id = CAST(:run_id AS uuid) AND claim_owner = CAST(:owner AS text)
       AND claim_epoch = CAST(:epoch AS int) AND status = 'running'
    RETURNING id
    """,
)

# The runs parked now, by key and tenant, and when the first of each may go
# (runs_parked_idx).
PARKED = Statement(
    "parked",
    """
    SELECT parked_key, tenant, count(*) AS runs, min(retry_at) AS next_at
      FROM runs
     WHERE parked_key IS NOT NULL AND status = 'queued'
       AND (CAST(:key AS text) IS NULL OR parked_key = CAST(:key AS text))
     GROUP BY parked_key, tenant
     ORDER BY parked_key, tenant NULLS FIRST
    """,
)


# Parked runs whose turn came under their limit before their time: claimable
# now. Only runs still parked (a claim or a cancel cleared the key meanwhile).
WAKE_PARKED = Statement(
    "wake_parked",
    """
    UPDATE runs SET retry_at = now(), enqueued_at = now(), updated_at = now()
     WHERE id = ANY(CAST(:ids AS uuid[])) AND status = 'queued'
       AND parked_key IS NOT NULL AND retry_at > now()
    RETURNING id
    """,
)


class PgFlow(PgExecution):
    def park(self, fence: Fence, key: str, at: datetime) -> Ended:
        """Park the fenced run on the limit ``key`` until ``at``: queued, its
        claim released, claimable from ``at`` on. The caller sends it again
        at ``at`` (``Ended.run.parked_until``)."""
        key = check_limit_key(key)
        outcome = park_outcome(at)
        params = {
            **fence_params(fence),
            **outcome_params(outcome, fence.run_id, self.sealing),
            "key": key,
        }
        if self.db.first(PARK, params) is None:
            raise lost_lease(fence)
        self._committed(fence.run_id)
        ended = self._after_end(fence.run_id, outcome)
        assert ended is not None
        return ended

    def wake_parked(self, run_ids: list[str]) -> list[str]:
        """Make the parked runs among ``run_ids`` claimable now (their turn
        came under their limit): the ids of those still parked, to send."""
        ids = [run_id for run_id in run_ids if is_canonical_id(run_id)]
        if not ids:
            return []
        return [str(row["id"]) for row in self.db.rows(WAKE_PARKED, {"ids": ids})]

    def parked(self, key: str | None = None) -> list[ParkedKey]:
        """The runs parked on each limit (only ``key``'s, if given), by key."""
        if key is not None:
            key = check_limit_key(key)
        tenants: dict[str, dict[str | None, int]] = {}
        next_at: dict[str, datetime] = {}
        for row in self.db.rows(PARKED, {"key": key}):
            name, at = row["parked_key"], row["next_at"]
            tenants.setdefault(name, {})[row["tenant"]] = int(row["runs"])
            next_at[name] = min(next_at.get(name, at), at)
        return [ParkedKey(name, sum(t.values()), t, next_at[name]) for name, t in tenants.items()]
