"""The store's statements sent from the event loop (store/onloop.py, issue 31).

An execution's fenced writes run the store's own code on the loop, inside a
greenlet, over non-blocking connections: the loop is never blocked while
Postgres works, a cancelled caller leaves the call to finish as a thread
would, and a lost or refused statement raises the store's errors as on a
thread. Real Postgres throughout."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from runner import Agent, Budget, Engine, tool
from runner.core.coordination.leases import Leases
from runner.core.coordination.live import Publisher, events_channel
from runner.core.events.feed import Feed
from runner.core.runtime import runtime
from runner.core.settings import Settings
from runner.testing import Request, ScriptedModel, call, text, tools
from store.db import make_engine, raw_cursor
from store.errors import ConstraintViolation, StoreUnavailable
from store.models import Run, RunStatus
from store.onloop import LoopPool, _pools, carried, carry
from store.postgres import PostgresStore
from store.statements import Statement

PID = Statement("onloop_pid", "SELECT pg_backend_pid() AS pid")


@pytest.fixture
def table(pg_store: PostgresStore) -> Iterator[str]:
    name = f"onloop_{uuid.uuid4().hex[:8]}"
    pg_store.db.execute(Statement(f"{name}_create", f"CREATE TABLE {name} (n int PRIMARY KEY)"))
    yield name
    pg_store.db.execute(Statement(f"{name}_drop", f"DROP TABLE IF EXISTS {name}"))


def _insert(table: str, *, sleep: float = 0.0) -> Statement:
    return Statement(
        f"{table}_insert_{int(sleep * 1000)}",
        f"INSERT INTO {table} SELECT CAST(:n AS int) FROM pg_sleep({sleep})",
    )


def _count(store: PostgresStore, table: str) -> int:
    row = store.db.first(Statement(f"{table}_count", f"SELECT count(*) AS n FROM {table}"))
    assert row is not None
    return int(row["n"])


def _backend(store: PostgresStore) -> int:
    """The server process of the connection this statement went over."""
    row = store.db.first(PID)
    assert row is not None
    return int(row["pid"])


def _pool(store: PostgresStore) -> LoopPool:
    loop = asyncio.get_running_loop()
    return _pools[loop][store.db.engine]


def _on_loop(make: Callable[[], Any]) -> Any:
    """Run ``make()``'s coroutine on the runtime's loop, as executions do."""

    async def go() -> Any:
        return await make()

    return runtime().run(go(), timeout=30)


def test_a_carried_statement_leaves_the_loop_free(pg_store: PostgresStore) -> None:
    sleepy = Statement("onloop_sleepy", "SELECT pg_sleep(0.4) AS slept")

    async def go() -> tuple[bool, bool]:
        loop = asyncio.get_running_loop()
        turn = asyncio.Event()

        def query() -> tuple[bool, bool]:
            # The loop's next turn sets the event: before the statement
            # returns only if the statement does not hold the loop.
            loop.call_soon(turn.set)
            pg_store.db.first(sleepy)
            return carried(), turn.is_set()

        return await carry(query)

    inside, free = _on_loop(go)
    assert inside
    assert free, "the loop stood still while the carried call ran"


def test_a_cancelled_caller_leaves_the_carried_call_to_finish(
    pg_store: PostgresStore, table: str
) -> None:
    """As a call on a thread: the write commits, the rest of the call runs,
    and the connection goes back to the pool once the statement is done."""
    finished: list[bool] = []

    def write() -> None:
        pg_store.db.execute(_insert(table, sleep=0.3), {"n": 1})
        finished.append(carried())

    async def go() -> tuple[int, int]:
        task = asyncio.ensure_future(carry(write))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert finished == []  # the caller left before the statement ended
        deadline = time.monotonic() + 5
        while not finished and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        pool = _pool(pg_store)
        return pool._open, len(pool._idle)

    opened, idle = _on_loop(go)
    assert finished == [True]
    assert _count(pg_store, table) == 1
    assert opened == idle == 1


def test_a_transaction_on_the_loop_that_raises_rolls_back_on_the_same_connection(
    pg_store: PostgresStore, table: str
) -> None:
    def fails() -> None:
        with pg_store.db.tx() as tx:
            tx.execute(_insert(table), {"n": 1})
            tx.execute(_insert(table), {"n": 2})
            raise RuntimeError("the block fails after two statements")

    async def go() -> tuple[int, int]:
        before = await carry(_backend, pg_store)
        with pytest.raises(RuntimeError):
            await carry(fails)
        return before, await carry(_backend, pg_store)

    before, after = _on_loop(go)
    assert _count(pg_store, table) == 0
    assert before == after  # rolled back, not thrown away


def test_a_refused_statement_on_the_loop_is_the_stores_error(
    pg_store: PostgresStore, table: str
) -> None:
    def twice() -> None:
        pg_store.db.execute(_insert(table), {"n": 7})
        pg_store.db.execute(_insert(table), {"n": 7})

    async def go() -> None:
        with pytest.raises(ConstraintViolation) as refused:
            await carry(twice)
        assert refused.value.constraint == f"{table}_pkey"
        assert "INSERT" not in str(refused.value)  # the statement is not quoted
        await carry(pg_store.db.execute, _insert(table), {"n": 8})  # the pool goes on

    _on_loop(go)
    assert _count(pg_store, table) == 2


def _terminate(database_url: str, pid: int) -> None:
    admin = make_engine(database_url, pool_size=1)
    try:
        with raw_cursor(admin) as cursor:
            cursor.connection.autocommit = True
            cursor.execute("SELECT pg_terminate_backend(%s)", (pid,))
    finally:
        admin.dispose()


def test_a_lost_connection_on_the_loop_is_unavailable_and_the_next_reconnects(
    pg_store: PostgresStore, database_url: str
) -> None:
    async def go() -> tuple[int, int, int]:
        first = await carry(_backend, pg_store)
        _terminate(database_url, first)
        await asyncio.sleep(0.2)
        # Used a moment ago: sent without a ping, and lost.
        with pytest.raises(StoreUnavailable, match="Postgres is unavailable"):
            await carry(_backend, pg_store)
        again = await carry(_backend, pg_store)
        return first, again, _pool(pg_store)._open

    first, second, opened = _on_loop(go)
    assert first != second and opened == 1


def test_a_connection_idle_for_a_while_is_pinged_and_replaced(
    pg_store: PostgresStore, database_url: str
) -> None:
    async def go() -> tuple[int, int]:
        first = await carry(_backend, pg_store)
        _terminate(database_url, first)
        await asyncio.sleep(0.2)
        for connection in _pool(pg_store)._idle:
            connection.used_at -= 60  # idle past the ping's threshold
        return first, await carry(_backend, pg_store)  # no error: the ping found it gone

    first, second = _on_loop(go)
    assert first != second


def test_closing_the_store_closes_its_loop_connections(database_url: str) -> None:
    store = PostgresStore(make_engine(database_url, pool_size=2))
    backend = _on_loop(lambda: carry(_backend, store))
    store.close()
    deadline = time.monotonic() + 5
    watcher = PostgresStore(make_engine(database_url, pool_size=1))
    try:
        alive = Statement(
            "onloop_alive", "SELECT count(*) AS n FROM pg_stat_activity WHERE pid = :pid"
        )

        def count() -> int:
            row = watcher.db.first(alive, {"pid": backend})
            assert row is not None
            return int(row["n"])

        while count() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert count() == 0
    finally:
        watcher.close()


# ----------------------------------------------------------- the engine's writes


@tool
def fetch(n: int) -> str:
    """Return a short text."""
    return f"item {n}"


def _agent() -> str:
    name = f"onloop-{uuid.uuid4().hex[:8]}"

    def script(request: Request) -> Any:
        if request.step < 3:
            return tools(call("fetch", {"n": request.step}))
        return text("done")

    Agent(
        name=name,
        model=ScriptedModel(name, script).model,
        tools=[fetch],
        budget=Budget(max_steps=10),
    )
    return name


def _carried_writes(store: PostgresStore, monkeypatch: pytest.MonkeyPatch) -> dict[str, list[bool]]:
    """Whether each step write ran carried on the loop."""
    seen: dict[str, list[bool]] = {"record_llm_step": [], "commit_step": []}
    for name, calls in seen.items():
        original = getattr(store, name)

        def spy(
            *args: Any, _original: Any = original, _calls: list[bool] = calls, **kw: Any
        ) -> Any:
            _calls.append(carried())
            return _original(*args, **kw)

        monkeypatch.setattr(store, name, spy)
    return seen


def _run_to_completion(engine: Engine) -> Run:
    """A run of ``_agent()`` executed to its end by ``engine``, which is closed."""
    try:
        run = engine.start(_agent(), {})
        done = engine.execute(run.id)
    finally:
        engine.close()
    assert done is not None and done.status is RunStatus.COMPLETED and done.steps_used == 3
    return done


@pytest.mark.parametrize("on_loop", [True, False])
def test_the_engine_writes_its_steps_from_the_loop_unless_told_not_to(
    pg_store: PostgresStore,
    leases: Leases,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    on_loop: bool,
) -> None:
    seen = _carried_writes(pg_store, monkeypatch)
    engine = Engine(
        pg_store, leases=leases, settings=dataclasses.replace(settings, store_on_loop=on_loop)
    )
    _run_to_completion(engine)
    assert seen["record_llm_step"] == [on_loop] * 3
    # The last commit settles the run: its lease release went to a thread.
    assert seen["commit_step"] == [on_loop] * 3


def test_a_write_the_loop_could_not_make_is_waited_out_on_a_thread(
    pg_store: PostgresStore,
    leases: Leases,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Postgres away during a carried write: the write is made again on the
    I/O pool, through the outage, and the run loses nothing."""
    calls: list[bool] = []
    original = pg_store.commit_step

    def flaky(*args: Any, **kwargs: Any) -> Any:
        calls.append(carried())
        if len(calls) == 2:
            raise StoreUnavailable("Postgres is unavailable: injected")
        return original(*args, **kwargs)

    monkeypatch.setattr(pg_store, "commit_step", flaky)
    engine = Engine(pg_store, leases=leases, settings=settings)
    run = _run_to_completion(engine)
    assert calls == [True, True, False, True]
    assert [s.name for s in engine.steps(run.id) if s.kind == "tool"] == ["fetch"] * 2


def _hops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What executions hand to the I/O pool (their journal's ``PgJournal.io``),
    by name, from now on, but for their heartbeats."""
    from runner.core.engine.pg_journal import PgJournal

    hops: list[str] = []
    io = PgJournal.io

    async def spy(self: PgJournal, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        name = getattr(fn, "__name__", repr(fn))
        if name != "_renew":  # the heartbeat's, every ttl / 3 s: a slow run's timing
            hops.append(name)
        return await io(self, fn, *args, **kwargs)

    monkeypatch.setattr(PgJournal, "io", spy)
    return hops


def test_a_run_that_completes_takes_the_io_pool_for_its_claim_only(
    pg_store: PostgresStore, leases: Leases, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its last write let its lease go and its settle hands nothing on: the
    execution's end takes no thread (it took one for nothing before)."""
    hops = _hops(monkeypatch)
    run = _run_to_completion(Engine(pg_store, leases=leases, settings=settings))
    assert hops == ["_claim"]
    assert leases.holder(run.id) is None


def test_a_settle_that_hands_on_the_next_run_of_its_key_takes_the_io_pool_for_it(
    pg_store: PostgresStore, leases: Leases, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = f"onloop-key-{uuid.uuid4().hex[:8]}"
    Agent(
        name=name,
        model=ScriptedModel(name, lambda request: text("done")).model,
        concurrency_key=lambda envelope: f"key-{name}",
        budget=Budget(max_steps=3),
    )
    sent: list[str] = []
    engine = Engine(pg_store, leases=leases, settings=settings, enqueue=sent.append)
    try:
        first, second = engine.start(name, {"n": 1}), engine.start(name, {"n": 2})
        sent.clear()
        hops = _hops(monkeypatch)
        done = engine.execute(first.id)
    finally:
        engine.close()
    assert done is not None and done.status is RunStatus.COMPLETED
    assert hops == ["_claim", "_finish"]
    assert sent == [second.id]


def test_carried_statements_beyond_the_pool_wait_their_turn(database_url: str) -> None:
    """A loop's pool holds at most its size: the statements beyond it wait
    for a connection, and every one of them runs."""
    store = PostgresStore(make_engine(database_url, pool_size=2))
    # Each statement says when, by the server's clock, it began and ended.
    sleepy = Statement(
        "onloop_turns",
        "SELECT clock_timestamp() AS began, (SELECT pg_sleep(0.1)) AS slept,"
        " clock_timestamp() AS ended",
    )
    most = 0
    ran: list[dict[str, Any]] = []

    async def go() -> None:
        nonlocal most
        pool: LoopPool | None = None

        async def one() -> None:
            nonlocal most, pool
            ran.append(await carry(store.db.first, sleepy))
            pool = _pool(store)
            most = max(most, pool._open)

        await asyncio.gather(*(one() for _ in range(6)))
        assert pool is not None
        most = max(most, pool._open)

    try:
        _on_loop(go)
    finally:
        store.close()
    assert most == 2
    assert len(ran) == 6
    # Two at a time: no statement began while two others were still running.
    edges = sorted([(r["began"], 1) for r in ran] + [(r["ended"], -1) for r in ran])
    running = [sum(step for _, step in edges[: i + 1]) for i in range(len(edges))]
    assert max(running) == 2, ran


@dataclasses.dataclass
class _Woken:
    """A feed on a Redis of the tests, and a listener of one run's wake-ups."""

    feed: Feed
    run_id: str
    listener: Any
    publisher: Publisher


@pytest.fixture
def woken(pg_store: PostgresStore, redis_url: str) -> Iterator[_Woken]:
    client = redis.Redis.from_url(redis_url)
    feed = Feed(pg_store, client)
    run_id = str(uuid.uuid4())
    listener = client.pubsub()  # type: ignore[no-untyped-call]
    listener.subscribe(events_channel(run_id))
    assert listener.get_message(timeout=5) is not None  # the subscription
    publisher = feed._publisher()
    try:
        yield _Woken(feed, run_id, listener, publisher)
    finally:
        listener.close()
        publisher.close()
        client.close()


def _senders(publisher: Publisher) -> list[str]:
    """The threads that make ``publisher``'s sends, in order, from now on."""
    senders: list[str] = []
    send = publisher._send

    def spy(channel: str, payload: bytes | str) -> bool:
        senders.append(threading.current_thread().name)
        return send(channel, payload)

    publisher._send = spy  # type: ignore[method-assign]
    return senders


def test_a_wake_up_from_the_loop_connects_on_a_thread(woken: _Woken) -> None:
    """The feed's first wake-up of a carried write needs Redis to connect:
    a thread connects and sends it, and the loop does not wait for that."""
    publisher = woken.publisher
    senders = _senders(publisher)
    assert not publisher.connected
    _on_loop(lambda: carry(woken.feed.wake, woken.run_id))
    message = woken.listener.get_message(timeout=5)
    assert message is not None and message["type"] == "message"
    with publisher._lock:  # the thread that sent it has let go of the publisher
        assert publisher.connected
    _on_loop(lambda: carry(woken.feed.wake, woken.run_id))  # connected and free: from the loop
    assert woken.listener.get_message(timeout=5) is not None
    assert [name.startswith("runwright-io") for name in senders] == [True, False]
    assert senders[1] == "runwright-loop"


def test_a_wake_up_from_the_loop_does_not_wait_for_another_threads_send(woken: _Woken) -> None:
    """While another thread holds the feed's publisher (a send, a reconnect
    that may take its 1 s timeout), a carried write's wake-up does not wait
    for it on the loop: a thread sends it once the publisher is free."""
    publisher = woken.publisher
    assert publisher.send("warm-up", b"")  # connected
    senders = _senders(publisher)
    order: list[str] = []
    held, woke = threading.Event(), threading.Event()

    def hold() -> None:
        with publisher._lock:
            held.set()
            woke.wait(timeout=5)  # the wake-up below waits at most this long
            order.append("released")

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(timeout=5)
        _on_loop(lambda: carry(woken.feed.wake, woken.run_id))
        order.append("woken")
        woke.set()
        message = woken.listener.get_message(timeout=5)
        assert message is not None and message["type"] == "message"
    finally:
        woke.set()
        holder.join()
    assert order == ["woken", "released"]
    assert len(senders) == 1 and senders[0].startswith("runwright-io")
