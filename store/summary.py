"""Light reads for the command line: psycopg2 and plain dicts only.

``runwright runs`` must start in well under half a second, so it does not load
SQLAlchemy or pydantic for a listing. Everything else goes through the store.
"""

from __future__ import annotations

from typing import Any

import psycopg2
import psycopg2.extras

from store.errors import InvalidInput, StoreRefused, StoreUnavailable
from store.revision import current_revision, require_revision

STATUSES = ("queued", "running", "waiting", "completed", "failed", "cancelled", "interrupted")


def libpq_url(url: str) -> str:
    for prefix in ("postgresql+psycopg2://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql://" + url[len(prefix) :]
    return url


def list_runs(
    url: str, *, status: str | None = None, agent: str | None = None, limit: int = 50
) -> list[dict[str, Any]]:
    if status is not None and status not in STATUSES:
        raise InvalidInput(f"unknown status {status!r}; use one of {', '.join(STATUSES)}")
    clauses, params = [], []
    if status is not None:
        clauses.append("status = %s")
        params.append(status)
    if agent is not None:
        clauses.append("agent = %s")
        params.append(agent)
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    sql = f"""
        SELECT id, agent, status, steps_used, input_tokens, output_tokens, error_code,
               concurrency_key, created_at, updated_at, finished_at
          FROM runs {where} ORDER BY id DESC LIMIT %s
    """
    conn = _connect(url)
    try:
        _require_schema(conn)
        with conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cursor:
            cursor.execute(sql, [*params, limit])
            return [dict(row) for row in cursor.fetchall()]
    except (psycopg2.DataError, psycopg2.ProgrammingError, ValueError) as exc:
        # ValueError: psycopg2 refuses NUL characters in parameters.
        reason = str(exc).strip().splitlines()[0]
        raise StoreRefused(f"Postgres refused the query: {reason}") from exc
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
    try:
        return psycopg2.connect(libpq_url(url), connect_timeout=5)
    except psycopg2.OperationalError as exc:
        raise StoreUnavailable(f"Postgres is unavailable: {exc}".strip()) from exc


def _require_schema(conn: Any) -> None:
    with conn.cursor() as cursor:

        def scalar(query: str) -> object:
            cursor.execute(query)
            row = cursor.fetchone()
            return None if row is None else row[0]

        require_revision(current_revision(scalar))
