"""Prepared statements, and running without them behind PgBouncer in
transaction mode (``RUNWRIGHT_DB_PREPARED=false``).

Store-specific: prepared statements exist only in Postgres. The whole contract
suite also runs unprepared (tests/integration/test_store_contract.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from runner.core.settings import Settings, open_store
from store.db import make_engine, pool_size, prepares, raw_cursor
from store.errors import ConfigurationError, StoreUnavailable
from store.models import Fence
from store.postgres import PostgresStore
from store.statements import Statement
from tests.helpers import claimed, commit, llm_record, msg


def _prepared_names(store: PostgresStore) -> set[str]:
    with raw_cursor(store.engine) as cursor:
        cursor.execute("SELECT name FROM pg_prepared_statements")
        return {row[0] for row in cursor.fetchall()}


def _forget_session(store: PostgresStore) -> None:
    """What PgBouncer in transaction mode amounts to: the next transaction may
    run on a server session that never saw this one's PREPARE or SET."""
    with raw_cursor(store.engine) as cursor:
        cursor.connection.autocommit = True
        cursor.execute("DISCARD ALL")
        cursor.connection.autocommit = False


def _step(store: PostgresStore, fence: Fence, index: int, base: int) -> None:
    store.record_llm_step(fence, llm_record(index))
    store.commit_step(fence, commit(index, base, [msg(base)]))


@pytest.fixture
def unprepared(database_url: str) -> Iterator[PostgresStore]:
    store = PostgresStore(make_engine(database_url, pool_size=1, prepared=False))
    yield store
    store.close()


@pytest.fixture
def prepared(database_url: str) -> Iterator[PostgresStore]:
    store = PostgresStore(make_engine(database_url, pool_size=1, prepared=True))
    yield store
    store.close()


def test_prepared_mode_prepares_the_hot_statements(prepared: PostgresStore) -> None:
    assert set(Statement.prepared) == {
        "runwright_record_llm_step",
        "runwright_commit_step",
        "runwright_commit_step_wait",
        "runwright_events_after",
    }
    fence = claimed(prepared)
    _step(prepared, fence, 1, 0)
    assert _prepared_names(prepared) == set(Statement.prepared)
    # Such a session does not survive a pooler's reset: the statements are gone.
    # The connection is dropped; its replacement prepares them again.
    _forget_session(prepared)
    with pytest.raises(StoreUnavailable, match="does not exist"):
        prepared.record_llm_step(fence, llm_record(2))
    assert prepared.record_llm_step(fence, llm_record(2)) is True


def test_unprepared_mode_runs_the_same_statements_on_any_session(
    unprepared: PostgresStore,
) -> None:
    fence = claimed(unprepared)
    for index in range(1, 4):
        _forget_session(unprepared)
        _step(unprepared, fence, index, index - 1)
    assert _prepared_names(unprepared) == set()
    checkpoint = unprepared.checkpoint(fence.run_id)
    assert checkpoint is not None and checkpoint.messages == [msg(0), msg(1), msg(2)]
    assert unprepared.get_run(fence.run_id).usage.input_tokens == 30


def test_the_setting_chooses_the_mode(database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store takes the mode as an argument; the engine's store (open_store)
    passes RUNWRIGHT_DB_PREPARED and RUNWRIGHT_DB_POOL_SIZE."""
    for raw, prepared in (("false", False), ("true", True)):
        monkeypatch.setenv("RUNWRIGHT_DB_PREPARED", raw)
        monkeypatch.setenv("RUNWRIGHT_DB_POOL_SIZE", "2")
        settings = replace(Settings.from_env(), database_url=database_url)
        assert settings.db_prepared is prepared
        store = open_store(settings)
        try:
            assert prepares(store.engine) is prepared
            assert pool_size(store.engine) == 2
            _step(store, claimed(store), 1, 0)
            assert (_prepared_names(store) != set()) is prepared
        finally:
            store.close()
    monkeypatch.setenv("RUNWRIGHT_DB_PREPARED", "maybe")
    with pytest.raises(ConfigurationError, match="RUNWRIGHT_DB_PREPARED must be true or false"):
        Settings.from_env()
