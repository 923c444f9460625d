"""Driver plumbing for Postgres: engines, JSON, and error translation.

Run semantics live in ``store/postgres.py``; this module only knows how to talk
to the database.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date, datetime
from typing import Any

import psycopg2
import sqlalchemy as sa
import sqlalchemy.event
import sqlalchemy.exc

from store.config import Settings
from store.errors import StoreRefused, StoreUnavailable


def _default(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def dumps(value: Any) -> str:
    try:
        return json.dumps(value, default=_default, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise StoreRefused(f"the value cannot be stored as JSON: {exc}") from exc


def normalize_url(url: str) -> str:
    """Accept ``postgres://`` and ``postgresql://`` and use psycopg2."""
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://") :]
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg2://" + url[len("postgresql://") :]
    return url


_engines: dict[tuple[int, str], sa.Engine] = {}
_engines_lock = threading.Lock()


class Prepared:
    """A server-side prepared statement for the hot path.

    Written with ``:name`` parameters like ``sa.text``; every parameter needs an
    explicit ``CAST`` so that Postgres can type it at ``PREPARE`` time. Each
    pooled connection prepares every registered statement once, when it connects,
    so a step's writes skip parsing and planning.
    """

    registry: dict[str, Prepared] = {}

    def __init__(self, name: str, sql: str) -> None:
        self.name = name
        self.params: list[str] = []

        def number(match: re.Match[str]) -> str:
            if match.group(1) not in self.params:
                self.params.append(match.group(1))
            return f"${self.params.index(match.group(1)) + 1}"

        self.sql = re.sub(r"(?<!:):(\w+)", number, sql)
        self.execute_sql = f"EXECUTE {name} ({', '.join(['%s'] * len(self.params))})"
        Prepared.registry[name] = self

    def args(self, params: dict[str, Any]) -> list[Any]:
        return [params[name] for name in self.params]


def _prepare_all(dbapi_connection: Any, _record: Any) -> None:
    with dbapi_connection.cursor() as cursor:
        # The hot statements' plans do not depend on their parameters: plan once.
        cursor.execute("SET plan_cache_mode = force_generic_plan")
        for statement in Prepared.registry.values():
            cursor.execute(f"PREPARE {statement.name} AS {statement.sql}")
    dbapi_connection.commit()


def make_engine(url: str, *, pool_size: int | None = None) -> sa.Engine:
    """A new engine. Pools are per process: after a fork, call again."""
    size = pool_size or Settings.from_env().db_pool_size
    engine = sa.create_engine(
        normalize_url(url),
        pool_size=size,
        max_overflow=size,
        # No pre-ping on every checkout (a round trip per transaction, twice a
        # step): _ping_if_idle pings only connections that sat idle.
        pool_recycle=1800,
        json_serializer=dumps,
        connect_args={"connect_timeout": 5, "application_name": "runwright"},
    )
    sa.event.listen(engine, "connect", _prepare_all)
    sa.event.listen(engine.pool, "checkout", _ping_if_idle)
    sa.event.listen(engine.pool, "checkin", _mark_used)
    return engine


# A connection idle for longer than this is pinged before use, so a server
# restart costs a reconnect rather than a failed request. Busy connections (the
# step loop's) skip the ping; if the server restarts under them, the failed
# write is retried by the execution.
IDLE_PING_SECONDS = 2.0


def _mark_used(_dbapi_connection: Any, record: Any) -> None:
    record.info["used_at"] = time.monotonic()


def _ping_if_idle(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
    if time.monotonic() - record.info.get("used_at", 0.0) < IDLE_PING_SECONDS:
        return
    try:
        with dbapi_connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        dbapi_connection.rollback()
    except (psycopg2.OperationalError, psycopg2.InterfaceError) as exc:
        # The pool discards this connection and checks out another one.
        raise sqlalchemy.exc.DisconnectionError(str(exc)) from exc


def shared_engine(url: str) -> sa.Engine:
    """One engine per URL per process (fork-safe: keyed by pid)."""
    key = (os.getpid(), url)
    with _engines_lock:
        engine = _engines.get(key)
        if engine is None:
            engine = _engines[key] = make_engine(url)
        return engine


@contextmanager
def raw_cursor(engine: sa.Engine) -> Iterator[Any]:
    """A driver cursor on a pooled connection, for prepared statements.

    The caller commits or rolls back through ``cursor.connection``; anything
    left open is rolled back when the connection returns to the pool.
    """
    try:
        raw = engine.raw_connection()
    except (psycopg2.OperationalError, psycopg2.InterfaceError) as exc:
        raise StoreUnavailable(f"Postgres is unavailable: {exc}".strip()) from exc
    except sqlalchemy.exc.DBAPIError as exc:
        raise StoreUnavailable(f"Postgres is unavailable: {exc.orig}".strip()) from exc
    try:
        cursor = raw.cursor()
        try:
            yield cursor
        finally:
            cursor.close()
    except (psycopg2.OperationalError, psycopg2.InterfaceError) as exc:
        raw.invalidate(exc)
        raise StoreUnavailable(f"Postgres is unavailable: {exc}") from exc
    except (psycopg2.DataError, psycopg2.ProgrammingError, ValueError) as exc:
        # ValueError: psycopg2 refuses NUL characters in parameters.
        raise refused(exc) from exc
    finally:
        raw.close()


@contextmanager
def db_errors() -> Iterator[None]:
    """Translate lost connections and server restarts into StoreUnavailable."""
    try:
        yield
    except sqlalchemy.exc.DBAPIError as exc:
        if exc.connection_invalidated or isinstance(
            exc, sqlalchemy.exc.OperationalError | sqlalchemy.exc.InterfaceError
        ):
            raise StoreUnavailable(f"Postgres is unavailable: {exc.orig}") from exc
        if isinstance(exc, sqlalchemy.exc.IntegrityError):
            raise  # the store reads constraint names off these
        raise refused(exc) from exc
    except sqlalchemy.exc.StatementError as exc:
        raise refused(exc) from exc


def refused(exc: BaseException) -> StoreRefused:
    """The driver's reason without the statement or its parameters, which may
    hold anything (a tool's output, a secret in a payload)."""
    orig = getattr(exc, "orig", None) or exc
    text = (getattr(orig, "pgerror", None) or str(orig)).strip()
    reason = text.splitlines()[0] if text else type(orig).__name__
    return StoreRefused(f"Postgres refused the statement: {reason}")


def is_unique_violation(exc: sqlalchemy.exc.IntegrityError, constraint: str) -> bool:
    diag = getattr(exc.orig, "diag", None)
    return getattr(diag, "constraint_name", None) == constraint
