"""The command line's light listing (``store/summary.py``): plain psycopg2."""

from __future__ import annotations

from store.queries import Statement

RUN_SUMMARIES = Statement(
    "run_summaries",
    """
    SELECT id, agent, status, steps_used, input_tokens, output_tokens, cost_usd, error_code,
           concurrency_key, created_at, updated_at, finished_at, retry_at, retry_attempts
      FROM runs
     WHERE (CAST(:status AS text) IS NULL OR status = CAST(:status AS text))
       AND (CAST(:agent AS text) IS NULL OR agent = CAST(:agent AS text))
     ORDER BY id DESC LIMIT CAST(:limit AS int)
    """,
)
