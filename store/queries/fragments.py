"""SQL shared by several statements: the clock, the fence and what an outcome writes."""

from __future__ import annotations

from store.status import RunStatus, lit

# ``now`` when a caller moves time (tests), otherwise the database clock.
NOW = "COALESCE(CAST(:now AS timestamptz), now())"

# What every write of a running run is conditional on (see store/base.py).
FENCE = (
    "id = CAST(:run_id AS uuid) AND claim_owner = CAST(:owner AS text)"
    f" AND claim_epoch = CAST(:epoch AS int) AND status = {lit(RunStatus.RUNNING)}"
)

# The columns an outcome writes, from the parameters ``store.rules.outcome_columns``
# gives (``o_status`` NULL: no outcome, the run stays as it is). Any outcome
# releases the claim: the run leaves ``running``. The only SQL that settles a
# run: every settling statement includes this.
OUTCOME_SET = """
    status = COALESCE(CAST(:o_status AS text), status),
    claim_owner = CASE WHEN CAST(:o_status AS text) IS NULL THEN claim_owner END,
    claim_expires_at = CASE WHEN CAST(:o_status AS text) IS NULL THEN claim_expires_at END,
    finished_at = CASE WHEN CAST(:o_settled AS bool) THEN now() ELSE finished_at END,
    output = CASE WHEN CAST(:o_settled AS bool) THEN CAST(:o_output AS jsonb) ELSE output END,
    error_code = CASE WHEN CAST(:o_settled AS bool) THEN CAST(:o_code AS text)
                      ELSE error_code END,
    error_message = CASE WHEN CAST(:o_settled AS bool) THEN CAST(:o_message AS text)
                         ELSE error_message END,
    enqueued_at = CASE WHEN CAST(:o_requeue AS bool)
                       THEN COALESCE(CAST(:o_requeue_at AS timestamptz), now())
                       ELSE enqueued_at END,
    updated_at = now()
"""
