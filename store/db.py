"""Driver plumbing for Postgres: engines, JSON, and the statement executor.

Run semantics live in the SQL beside the store's methods (``store/pg/``) and in
``store/rules.py``; this module only knows how to talk to the database.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

import sqlalchemy as sa
import sqlalchemy.event
import sqlalchemy.exc

from store.dberrors import LOST, REFUSED, refused, unavailable
from store.errors import StoreRefused
from store.onloop import LoopPool, carried, close_pools, loop_cursor, pool_for
from store.statements import Statement


def _default(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


# Each escape of JSON text: a surrogate pair (one character beyond the BMP),
# else a NUL or a lone surrogate (group 1), else any other. Matched from the
# left, an escaped backslash is consumed whole, so "\\u0000" is no NUL.
_ESCAPE = re.compile(r"\\(?:ud[89ab][0-9a-f]{2}\\ud[c-f][0-9a-f]{2}|u(0000|d[89a-f][0-9a-f]{2})|.)")


def dumps(value: Any) -> str:
    """``value`` as the JSON text the store writes. A NUL or a lone surrogate
    is refused: no text column can hold one when it is read back, jsonb
    refuses them, and the json columns that keep key order
    would not (revision 0012)."""
    try:
        text = json.dumps(value, default=_default, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise StoreRefused(f"the value cannot be stored as JSON: {exc}") from exc
    # json.dumps escapes every non-ASCII character, in lower-case hex.
    if ("\\u0000" in text or "\\ud" in text) and any(m.group(1) for m in _ESCAPE.finditer(text)):
        raise StoreRefused(
            "the value cannot be stored as JSON: it holds a NUL character or a lone surrogate"
        )
    return text


def normalize_url(url: str) -> str:
    """Accept ``postgres://`` and ``postgresql://`` and use psycopg2."""
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://") :]
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg2://" + url[len("postgresql://") :]
    return url


_engines: dict[tuple[int, str, int, bool], sa.Engine] = {}
_engines_lock = threading.Lock()


def setup_statements() -> list[str]:
    """What a connection runs first, in prepared mode: the hot statements."""
    # The hot statements' plans do not depend on their parameters: plan once.
    return ["SET plan_cache_mode = force_generic_plan"] + [
        f"PREPARE {statement.name} AS {statement.numbered}"
        for statement in Statement.prepared.values()
    ]


def _prepare_all(dbapi_connection: Any, _record: Any) -> None:
    with dbapi_connection.cursor() as cursor:
        for sql in setup_statements():
            cursor.execute(sql)
    dbapi_connection.commit()


DEFAULT_POOL_SIZE = 10  # RUNWRIGHT_DB_POOL_SIZE
CONNECT_ARGS = {"connect_timeout": 5, "application_name": "runwright"}


@dataclass(frozen=True)
class _Made:
    """What :func:`make_engine` was asked for."""

    pool_size: int
    prepared: bool


_made: weakref.WeakKeyDictionary[sa.Engine, _Made] = weakref.WeakKeyDictionary()


def prepares(engine: sa.Engine) -> bool:
    """Whether ``engine``'s connections hold the prepared statements."""
    made = _made.get(engine)
    return made is not None and made.prepared


def pool_size(engine: sa.Engine) -> int:
    """The pool size ``engine`` was made with (``RUNWRIGHT_DB_POOL_SIZE``)."""
    made = _made.get(engine)
    return made.pool_size if made is not None else engine.pool.size()  # type: ignore[attr-defined]


def make_engine(
    url: str, *, pool_size: int = DEFAULT_POOL_SIZE, prepared: bool = True
) -> sa.Engine:
    """A new engine. Pools are per process: after a fork, call again.

    ``pool_size`` (``RUNWRIGHT_DB_POOL_SIZE``): the threads' pool opens
    connections as its callers need them, up to twice ``pool_size``, and
    keeps each one; the writes an event loop sends itself take up to
    ``pool_size`` more (store/onloop.py).

    ``prepared`` (``RUNWRIGHT_DB_PREPARED``): each connection prepares the hot
    statements when it connects. Off behind PgBouncer in transaction mode,
    where a session's prepared statements and settings do not follow it from
    one transaction to the next; the same statements then run unprepared.
    """
    engine = sa.create_engine(
        normalize_url(url),
        # Up to twice pool_size connections for the threads, each kept once
        # opened. An overflow that closed every connection past pool_size as it
        # came back opened 30 to 50 in each burst of 250 runs, each a new
        # Postgres backend with cold caches: a quarter of Postgres's CPU per
        # step (bench/results/2026-12-04-connections-opened-in-a-burst.md). The last
        # connection back goes out first, so those a burst added go idle after
        # it (an idle one is pinged before use: _ping_if_idle).
        pool_size=2 * pool_size,
        max_overflow=0,
        pool_use_lifo=True,
        # No pre-ping on every checkout (a round trip per transaction, twice a
        # step): _ping_if_idle pings only connections that sat idle.
        pool_recycle=1800,
        json_serializer=dumps,
        connect_args=CONNECT_ARGS,
    )
    if prepared:
        sa.event.listen(engine, "connect", _prepare_all)
    _made[engine] = _Made(pool_size=pool_size, prepared=prepared)
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
    except LOST as exc:
        # The pool discards this connection and checks out another one.
        raise sqlalchemy.exc.DisconnectionError(str(exc)) from exc


def shared_engine(
    url: str, *, pool_size: int = DEFAULT_POOL_SIZE, prepared: bool = True
) -> sa.Engine:
    """One engine per URL and pool shape per process (fork-safe: keyed by pid)."""
    key = (os.getpid(), url, pool_size, prepared)
    with _engines_lock:
        engine = _engines.get(key)
        if engine is None:
            engine = _engines[key] = make_engine(url, pool_size=pool_size, prepared=prepared)
        return engine


Row = dict[str, Any]


class Tx:
    """Statements inside one transaction of :meth:`Executor.tx`."""

    statements = 0

    def __init__(self, cursor: Any, prepared: bool) -> None:
        self.cursor = cursor
        self.prepared = prepared

    def execute(self, statement: Statement, params: dict[str, Any] | None = None) -> int:
        """Run ``statement``; the number of rows it touched."""
        self.statements += 1
        params = params or {}
        if self.prepared and statement.name in Statement.prepared:
            self.cursor.execute(statement.execute_sql, statement.args(params))
        else:
            self.cursor.execute(statement.pyformat, params)
        return int(self.cursor.rowcount)

    def rows(self, statement: Statement, params: dict[str, Any] | None = None) -> list[Row]:
        self.execute(statement, params)
        names = [column.name for column in self.cursor.description]
        return [dict(zip(names, row, strict=True)) for row in self.cursor.fetchall()]

    def first(self, statement: Statement, params: dict[str, Any] | None = None) -> Row | None:
        self.execute(statement, params)
        row = self.cursor.fetchone()
        if row is None:
            return None
        return {
            column.name: value for column, value in zip(self.cursor.description, row, strict=True)
        }


class Executor:
    """Runs named statements (``store/statements.py``) on pooled connections.

    It owns connections, prepared statements and driver-error translation:
    nothing above it sees psycopg2 or SQLAlchemy. Prepared or not is the
    engine's (``make_engine``); the statements are the same either way.
    """

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self.prepared = prepares(engine)
        # Transactions committed, and statements run: what a step costs in
        # round trips (benchmarks and a test read them; a counter is cheap).
        self.commits = 0
        self.statements = 0

    @contextmanager
    def tx(self) -> Iterator[Tx]:
        """One transaction: committed when the block ends, rolled back if it raises."""
        with self._cursor(transaction=True) as cursor:
            tx = Tx(cursor, self.prepared)
            try:
                yield tx
                if carried():
                    cursor.commit()
                else:
                    cursor.connection.commit()
                self.commits += 1
            finally:
                self.statements += tx.statements

    @contextmanager
    def _alone(self) -> Iterator[Tx]:
        """One statement as its own transaction: Postgres commits it as it
        ends (autocommit), one round trip where ``BEGIN``, the statement and
        ``COMMIT`` are three. A statement is atomic by itself, so this changes
        nothing but the round trips (a step's two writes: issue 31)."""
        with self._cursor(transaction=False) as cursor:
            tx = Tx(cursor, self.prepared)
            try:
                yield tx
                self.commits += 1
            finally:
                self.statements += tx.statements

    @contextmanager
    def _cursor(self, *, transaction: bool) -> Iterator[Any]:
        """A cursor of the threads' pool, or of the loop's inside
        :func:`store.onloop.carry`; ``transaction`` False: each statement
        commits as it ends."""
        if carried():
            with loop_cursor(self._loop_pool(), transaction=transaction) as cursor:
                yield cursor
            return
        with raw_cursor(self.engine) as cursor:
            if transaction:
                yield cursor
                return
            connection = cursor.connection
            connection.autocommit = True
            try:
                yield cursor
            finally:
                if not connection.closed:  # a lost connection is discarded as it is
                    connection.autocommit = False

    def _loop_pool(self) -> LoopPool:
        engine = self.engine
        size = pool_size(engine)
        return pool_for(
            engine,
            lambda: LoopPool(
                {**engine.dialect.create_connect_args(engine.url)[1], **CONNECT_ARGS},
                size=size,
                setup=";".join(setup_statements()) if self.prepared else "",
                idle_ping=IDLE_PING_SECONDS,
            ),
        )

    def close(self) -> None:
        """Close the pools' connections: the threads' and every loop's."""
        close_pools(self.engine)
        self.engine.dispose()

    def rows(self, statement: Statement, params: dict[str, Any] | None = None) -> list[Row]:
        """One statement, its own transaction: its rows."""
        with self._alone() as tx:
            return tx.rows(statement, params)

    def first(self, statement: Statement, params: dict[str, Any] | None = None) -> Row | None:
        """One statement, its own transaction: its first row."""
        with self._alone() as tx:
            return tx.first(statement, params)

    def execute(self, statement: Statement, params: dict[str, Any] | None = None) -> int:
        """One statement, its own transaction: the rows it touched."""
        with self._alone() as tx:
            return tx.execute(statement, params)


@contextmanager
def raw_cursor(engine: sa.Engine) -> Iterator[Any]:
    """A driver cursor on a pooled connection, with the store's errors.

    The caller commits through ``cursor.connection``; anything left open is
    rolled back when the connection returns to the pool.
    """
    try:
        raw = engine.raw_connection()
    except LOST as exc:
        raise unavailable(exc) from exc
    except sqlalchemy.exc.DBAPIError as exc:
        raise unavailable(exc.orig) from exc
    try:
        cursor = raw.cursor()
        try:
            yield cursor
        finally:
            cursor.close()
    except LOST as exc:
        raw.invalidate(exc)
        raise unavailable(exc) from exc
    except REFUSED as exc:
        raise refused(exc) from exc
    finally:
        raw.close()


@contextmanager
def db_errors() -> Iterator[None]:
    """The store's errors for SQLAlchemy's wrapped driver errors (migrations),
    translated as the executor translates them."""
    try:
        yield
    except sqlalchemy.exc.DBAPIError as exc:
        if exc.connection_invalidated or isinstance(exc.orig, LOST):
            raise unavailable(exc.orig) from exc
        raise refused(exc) from exc
    except sqlalchemy.exc.StatementError as exc:
        raise refused(exc) from exc
