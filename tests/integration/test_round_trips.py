"""What a durable step costs in round trips to Postgres (issues 16 and 31): a
plain tool step is two commits of one statement each, the journal write (the
model's reply, journaled before any tool runs) and the step commit (the tool's
result and the checkpoint), at step 3 as at step 30, and each is one message
to the server: the statement is its own transaction, with no ``BEGIN`` and
``COMMIT`` of their own. A refactor that adds a read or a write to the hot path
fails here, not only in a benchmark."""

from __future__ import annotations

import socket
import struct
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from runner import Agent, Budget, Engine, tool
from runner.core.coordination.leases import Leases
from runner.core.settings import Settings
from runner.testing import Request, ScriptedModel, call, text, tools
from store.db import make_engine, raw_cursor
from store.errors import StoreUnavailable
from store.models import RunStatus
from store.postgres import PostgresStore
from store.statements import Statement
from tests.tcpproxy import TcpProxy


@tool
def fetch(n: int) -> str:
    """Return about a kilobyte."""
    return "x" * 1000


def _agent() -> str:
    name = f"round-trips-{uuid.uuid4().hex[:8]}"

    def script(request: Request) -> Any:
        if request.step < int(request.payload["steps"]):
            return tools(call("fetch", {"n": request.step}))
        return text("done")

    model = ScriptedModel(name, script)
    Agent(name=name, model=model.model, tools=[fetch], budget=Budget(max_steps=100))
    return name


def _cost(engine: Engine, store: PostgresStore, agent: str, steps: int) -> tuple[int, int]:
    run = engine.start(agent, {"steps": steps})
    commits, statements = store.db.commits, store.db.statements
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED and done.steps_used == steps
    return store.db.commits - commits, store.db.statements - statements


def test_a_plain_tool_step_is_two_commits_of_one_statement_each(
    engine: Engine, pg_store: PostgresStore
) -> None:
    agent = _agent()
    _cost(engine, pg_store, agent, 2)  # warm: the first execution prepares and imports
    short_commits, short_statements = _cost(engine, pg_store, agent, 5)
    long_commits, long_statements = _cost(engine, pg_store, agent, 30)
    # The difference is 25 steps of the hot path alone (claim, start and
    # settle are the same in both runs).
    assert (long_commits - short_commits) / 25 == 2
    assert (long_statements - short_statements) / 25 == 2
    # An execution's fixed cost: the claim with its start point, and the settle.
    assert short_commits - 5 * 2 <= 4, short_commits


# Startup packets with no message type: a request for TLS or GSS encryption
# comes before the startup message proper.
_ENCRYPTION_REQUESTS = (80877103, 80877104)


class QueryCounter:
    """Counts the queries clients send Postgres: the frontend's ``Query``
    messages ('Q'), one round trip each (psycopg2 speaks the simple protocol)."""

    def __init__(self) -> None:
        self.queries = 0  # written by the proxy's one thread only
        self._streams: dict[socket.socket, bytearray] = {}
        self._started: set[socket.socket] = set()

    def __call__(self, sock: socket.socket, data: bytes) -> None:
        stream = self._streams.setdefault(sock, bytearray())
        stream += data
        while True:
            if sock not in self._started:  # untyped: length, then a code
                if len(stream) < 8:
                    return
                length, code = struct.unpack("!ii", stream[:8])
                if len(stream) < length:
                    return
                del stream[:length]
                if code not in _ENCRYPTION_REQUESTS:
                    self._started.add(sock)
                continue
            if len(stream) < 5:  # a type byte, then a length that counts itself
                return
            (length,) = struct.unpack("!i", stream[1:5])
            if len(stream) < 1 + length:
                return
            kind = stream[0]
            del stream[: 1 + length]
            if kind == ord("Q"):
                self.queries += 1


@pytest.fixture
def counted(database_url: str) -> Iterator[tuple[PostgresStore, QueryCounter]]:
    """A store whose connections go through a proxy that counts their queries."""
    counter = QueryCounter()
    direct = make_url(database_url)
    proxy = TcpProxy(direct.host or "127.0.0.1", direct.port or 5432, from_client=counter)
    proxy.start()
    url = direct.set(host="127.0.0.1", port=proxy.port, query={"sslmode": "disable"})
    store = PostgresStore(make_engine(url.render_as_string(False), pool_size=5))
    try:
        yield store, counter
    finally:
        store.close()
        proxy.close()


def test_a_plain_tool_step_is_two_round_trips_to_postgres(
    counted: tuple[PostgresStore, QueryCounter],
    leases: Leases,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store, counter = counted
    # No pool ping of a connection that sat idle: only the steps' own queries.
    monkeypatch.setattr("store.db.IDLE_PING_SECONDS", 3600.0)
    engine = Engine(store, leases=leases, settings=settings)
    try:
        agent = _agent()
        _cost(engine, store, agent, 2)  # warm: connections made, statements prepared
        before = counter.queries
        _cost(engine, store, agent, 5)
        short = counter.queries - before
        before = counter.queries
        _cost(engine, store, agent, 30)
        long = counter.queries - before
    finally:
        engine.close()
    # A transaction of its own would be three: BEGIN, the statement, COMMIT.
    assert (long - short) / 25 == 2, (short, long)


def test_a_connection_lent_for_one_statement_comes_back_to_transactions(
    database_url: str,
) -> None:
    """One statement runs in autocommit; the pool's next transaction on the
    same connection is a transaction again: rolled back whole if it raises."""
    store = PostgresStore(make_engine(database_url, pool_size=1))
    table = f"lent_{uuid.uuid4().hex[:8]}"
    create = Statement(f"{table}_create", f"CREATE TABLE {table} (n int)")
    insert = Statement(f"{table}_insert", f"INSERT INTO {table} VALUES (CAST(:n AS int))")
    count = Statement(f"{table}_count", f"SELECT count(*) AS n FROM {table}")
    try:
        store.db.execute(create)
        assert store.db.execute(insert, {"n": 1}) == 1  # committed alone
        with pytest.raises(RuntimeError), store.db.tx() as tx:
            tx.execute(insert, {"n": 2})
            tx.execute(insert, {"n": 3})
            raise RuntimeError("the block fails after two statements")
        assert store.db.first(count) == {"n": 1}
    finally:
        store.db.execute(Statement(f"{table}_drop", f"DROP TABLE IF EXISTS {table}"))
        store.close()


def test_a_statement_whose_connection_dies_is_unavailable_and_the_pool_recovers(
    pg_store: PostgresStore, database_url: str
) -> None:
    """The server goes away under a lent connection: the caller gets the
    store's outage error, not the driver's, and the next statement reconnects."""
    store = pg_store
    assert store.db.first(Statement("lent_one", "SELECT 1 AS one")) == {"one": 1}
    admin_engine = make_engine(database_url, pool_size=1)
    try:
        with raw_cursor(admin_engine) as admin:
            admin.connection.autocommit = True
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                " AND application_name = 'runwright' AND state = 'idle'"
            )
    finally:
        admin_engine.dispose()
    with pytest.raises(StoreUnavailable):
        store.db.first(Statement("lent_one", "SELECT 1 AS one"))
    assert store.db.first(Statement("lent_one", "SELECT 1 AS one")) == {"one": 1}
