from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from store.db import make_engine
from store.leases import Leases, connect
from store.memory import MemoryStore
from store.postgres import PostgresStore
from tests.services import Services, discover


@pytest.fixture(scope="session")
def services() -> Iterator[Services]:
    found = discover()
    yield found
    conn = found.admin()
    try:
        with conn.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{found.template}" WITH (FORCE)')
    finally:
        conn.close()


@pytest.fixture
def database_url(services: Services) -> Iterator[str]:
    """A fresh, migrated database of this test's own."""
    name = services.new_database()
    yield services.database_url(name)
    services.drop_database(name)


@pytest.fixture
def pg_store(database_url: str) -> Iterator[PostgresStore]:
    store = PostgresStore(make_engine(database_url, pool_size=5))
    yield store
    store.close()


@pytest.fixture
def redis_url(services: Services) -> str:
    """A Redis database number of this test's own, flushed."""
    return services.redis_url()


@pytest.fixture
def leases(redis_url: str) -> Iterator[Leases]:
    client = connect(redis_url)
    yield Leases(client)
    client.close()


@pytest.fixture
def memory_store() -> MemoryStore:
    return MemoryStore()


@pytest.fixture(params=["memory", "postgres"])
def any_store(request: pytest.FixtureRequest) -> PostgresStore | MemoryStore:
    """Contract tests run on both stores: the in-memory one must not drift."""
    if request.param == "memory":
        return MemoryStore()
    store: PostgresStore = request.getfixturevalue("pg_store")
    return store
