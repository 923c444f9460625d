"""The run-event feed (store/events.py): a run's events after an id, in id order."""

from __future__ import annotations

from store.queries import Statement

# Step events are the steps rows; the others are run_events rows. Each branch
# walks its primary key (run_id, id) from the reader's last id.
EVENTS_AFTER = Statement(
    "runwright_events_after",
    """
    (SELECT id, 'step' AS type, CAST(NULL AS jsonb) AS data, started_at AS at, run_id, kind,
            index, name, tool_call_id, input, output, error, input_tokens, output_tokens,
            cost_usd, started_at, finished_at
       FROM steps WHERE run_id = CAST(:run_id AS uuid) AND id > CAST(:after AS bigint)
      ORDER BY id LIMIT CAST(:limit AS int))
    UNION ALL
    (SELECT id, type, data, at, run_id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
            NULL, NULL, NULL
       FROM run_events WHERE run_id = CAST(:run_id AS uuid) AND id > CAST(:after AS bigint)
      ORDER BY id LIMIT CAST(:limit AS int))
    ORDER BY id LIMIT CAST(:limit AS int)
    """,
    prepare=True,
)
