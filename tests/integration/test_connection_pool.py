"""The threads' pool of Postgres connections (store/db.py make_engine).

A worker's burst of runs makes its I/O threads claim, renew and read many
runs at once. The pool opens up to twice ``RUNWRIGHT_DB_POOL_SIZE``
connections for such a burst and keeps them: a pool that closed every
connection past the pool size as it came back opened dozens of connections
in each burst of 250 runs (a new Postgres backend each, with cold caches and
its statements prepared again), which cost Postgres about a quarter of its
CPU per step (bench/results/2026-12-04-connections-opened-in-a-burst.md).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from store.db import make_engine, pool_size

POOL_SIZE = 2


@pytest.fixture
def engine(database_url: str) -> Iterator[sa.Engine]:
    made = make_engine(database_url, pool_size=POOL_SIZE)
    yield made
    made.dispose()


class _Counts:
    """Connections the pool opened, and the most it had out at once."""

    def __init__(self, engine: sa.Engine) -> None:
        self.opened = 0
        self.out = 0
        self.most_out = 0
        self._lock = threading.Lock()
        sa.event.listen(engine, "connect", self._opened)
        sa.event.listen(engine.pool, "checkout", self._checked_out)
        sa.event.listen(engine.pool, "checkin", self._checked_in)

    def _opened(self, *_: object) -> None:
        with self._lock:
            self.opened += 1

    def _checked_out(self, *_: object) -> None:
        with self._lock:
            self.out += 1
            self.most_out = max(self.most_out, self.out)

    def _checked_in(self, *_: object) -> None:
        with self._lock:
            self.out -= 1


def _burst(engine: sa.Engine, callers: int, hold_seconds: float) -> None:
    """``callers`` threads that each run a query on a connection of their
    own and hold it ``hold_seconds``, all at once."""
    start = threading.Barrier(callers)
    failures: list[BaseException] = []

    def call() -> None:
        try:
            start.wait(10)
            with engine.connect() as connection:
                assert connection.execute(sa.text("SELECT 1")).scalar() == 1
                time.sleep(hold_seconds)
        except BaseException as exc:  # reported by the test's thread
            failures.append(exc)

    threads = [threading.Thread(target=call) for _ in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not failures, failures


def test_a_burst_opens_its_connections_once_and_the_next_burst_reuses_them(
    engine: sa.Engine,
) -> None:
    counts = _Counts(engine)
    _burst(engine, 2 * POOL_SIZE, hold_seconds=0.2)
    assert counts.opened == 2 * POOL_SIZE
    assert counts.out == 0
    # The same burst again: every connection it needs is still open.
    _burst(engine, 2 * POOL_SIZE, hold_seconds=0.2)
    assert counts.opened == 2 * POOL_SIZE


def test_a_burst_past_the_limit_waits_for_a_connection_instead_of_opening_one(
    engine: sa.Engine,
) -> None:
    counts = _Counts(engine)
    _burst(engine, 3 * POOL_SIZE, hold_seconds=0.3)
    assert counts.most_out == 2 * POOL_SIZE
    assert counts.opened == 2 * POOL_SIZE


def test_the_loop_pool_takes_the_configured_size_not_the_threads_limit(
    engine: sa.Engine,
) -> None:
    """The writes an event loop sends itself take up to the pool size more
    (store/onloop.py): the setting's number, not the threads' limit of twice it."""
    assert pool_size(engine) == POOL_SIZE
