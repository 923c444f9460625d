"""Light reads for the command line: psycopg2 and plain dicts only.

``runwright runs`` must start in well under half a second, so it does not load
SQLAlchemy or pydantic for a listing. Everything else goes through the store.
"""

from __future__ import annotations

import re
from typing import Any

import psycopg2
import psycopg2.extras

from store.dberrors import translated
from store.errors import InvalidInput
from store.revision import current_revision, require_revision
from store.statements import Statement
from store.status import RunStatus

# ``:version`` names a version by its label (an agent's version so labelled)
# or else by its id or a prefix of it, as ``runwright runs upgrade`` reads it.
RUN_SUMMARIES = Statement(
    "run_summaries",
    """
    SELECT id, agent, status, steps_used, input_tokens, output_tokens, usage_estimated,
           cost_usd, error_code, error_message, concurrency_key, created_at, updated_at,
           finished_at, retry_at, retry_attempts, needs_attention, cost_unpriced,
           interrupted_reason, version, parked_key,
           w.tool_name AS waiting_on, w.kind AS waiting_kind
      FROM runs
      LEFT JOIN LATERAL (
           SELECT a.tool_name, a.kind FROM approvals a
            WHERE a.run_id = runs.id AND a.decision IS NULL
            ORDER BY a.created_at LIMIT 1) AS w ON true
     WHERE (CAST(:status AS text) IS NULL OR status = CAST(:status AS text))
       AND (CAST(:agent AS text) IS NULL OR agent = CAST(:agent AS text))
       AND (NOT CAST(:attention AS bool) OR needs_attention)
       AND (CAST(:version AS text) IS NULL OR EXISTS (
            SELECT 1 FROM agent_versions AS v
             WHERE v.agent = runs.agent AND v.label = CAST(:version AS text)
               AND v.version = runs.version)
            OR (starts_with(version, CAST(:version AS text)) AND NOT EXISTS (
                SELECT 1 FROM agent_versions AS v
                 WHERE v.agent = runs.agent AND v.label = CAST(:version AS text))))
     ORDER BY id DESC LIMIT CAST(:limit AS int)
    """,
)


STATUSES = tuple(status.value for status in RunStatus)
# What names a version: an id or a prefix of it (hex), or a label
# (runner/core/versions.py, LABEL; that module is not loaded for a listing).
VERSION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")

# The agents a worker must have now: those with runs not yet ended, or
# created since :since (an id bound, store/ids.py: read off the primary key).
AGENTS_IN_USE = Statement(
    "agents_in_use",
    """
    SELECT agent,
           count(*) FILTER (WHERE status IN ('queued', 'interrupted')) AS waiting_for_worker,
           min(enqueued_at) FILTER (WHERE status IN ('queued', 'interrupted')) AS oldest
      FROM runs
     WHERE NOT (status IN ('completed', 'failed', 'cancelled')) OR id >= CAST(:since AS uuid)
     GROUP BY agent
     ORDER BY agent
    """,
)


def libpq_url(url: str) -> str:
    for prefix in ("postgresql+psycopg2://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql://" + url[len(prefix) :]
    return url


def list_runs(
    url: str,
    *,
    status: str | None = None,
    agent: str | None = None,
    limit: int = 50,
    needs_attention: bool = False,
    version: str | None = None,
) -> list[dict[str, Any]]:
    """The latest runs, newest first. ``version``: only runs on that agent
    version, named by its id, a prefix of it, or its label."""
    if status is not None and status not in STATUSES:
        raise InvalidInput(f"unknown status {status!r}; use one of {', '.join(STATUSES)}")
    if version is not None and not VERSION_NAME.fullmatch(version):
        raise InvalidInput(
            f"--version {version[:70]!r} is not a version's id, a prefix of it, or its label"
        )
    conn = _connect(url)
    try:
        with translated():
            _require_schema(conn)
            with conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cursor:
                params = {
                    "status": status,
                    "agent": agent,
                    "limit": limit,
                    "attention": bool(needs_attention),
                    "version": version,
                }
                cursor.execute(RUN_SUMMARIES.pyformat, params)
                return [dict(row) for row in cursor.fetchall()]
    finally:
        conn.close()


def require_schema(url: str) -> None:
    """:class:`SchemaMismatch` in one line unless the database at ``url`` has the
    schema this code needs. On a connection of its own, before any pool
    prepares statements against tables that may not exist."""
    conn = _connect(url)
    try:
        _require_schema(conn)
    finally:
        conn.close()


def _connect(url: str) -> Any:
    with translated():
        return psycopg2.connect(libpq_url(url), connect_timeout=5)


def _require_schema(conn: Any) -> None:
    with conn.cursor() as cursor:

        def scalar(query: str) -> object:
            cursor.execute(query)
            row = cursor.fetchone()
            return None if row is None else row[0]

        require_revision(current_revision(scalar))


def agents_in_use(conn: Any, since_ms: int) -> list[dict[str, Any]]:
    """On an open psycopg2 connection: each agent with runs not ended or
    created since ``since_ms`` (epoch ms), with how many wait for a worker
    (queued or interrupted) and since when (the oldest's enqueue)."""
    from store.ids import first_id_at

    with translated(), conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cursor:
        cursor.execute(AGENTS_IN_USE.pyformat, {"since": first_id_at(since_ms)})
        return [dict(row) for row in cursor.fetchall()]
