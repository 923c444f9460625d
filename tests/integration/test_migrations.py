"""Alembic ``upgrade head`` on an empty database gives exactly the SQLAlchemy metadata."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from store.migrate import downgrade, upgrade
from store.postgres import PostgresStore
from store.schema import metadata
from tests.helpers import try_claim
from tests.services import Services

CATALOG = {
    "columns": """
        SELECT table_name, column_name, data_type, is_nullable, column_default,
               is_identity, identity_generation
          FROM information_schema.columns WHERE table_schema = 'public'
           AND table_name <> 'alembic_version'
         ORDER BY table_name, column_name""",
    "indexes": """
        SELECT tablename, indexname, indexdef FROM pg_indexes
         WHERE schemaname = 'public' AND tablename <> 'alembic_version'
         ORDER BY tablename, indexname""",
    "constraints": """
        SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid)
          FROM pg_constraint WHERE connamespace = 'public'::regnamespace
           AND conrelid::regclass::text <> 'alembic_version'
         ORDER BY 1, 2""",
    "sequences": """
        SELECT sequence_name, data_type, start_value, increment FROM information_schema.sequences
         WHERE sequence_schema = 'public' ORDER BY 1""",
    "triggers": """
        SELECT tgrelid::regclass::text, tgname, pg_get_triggerdef(oid) FROM pg_trigger
         WHERE NOT tgisinternal ORDER BY 1, 2""",
    "functions": """
        SELECT proname, prosrc FROM pg_proc
         WHERE pronamespace = 'public'::regnamespace ORDER BY 1""",
}


def _catalog(url: str) -> dict[str, list[Any]]:
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg2://"))
    try:
        with engine.connect() as conn:
            return {k: [tuple(r) for r in conn.execute(sa.text(q))] for k, q in CATALOG.items()}
    finally:
        engine.dispose()


@pytest.fixture
def empty_databases(services: Services) -> Iterator[tuple[str, str]]:
    names = [f"rw_mig_{i}_{id(services)}" for i in (1, 2)]
    conn = services.admin()
    try:
        with conn.cursor() as cur:
            for name in names:
                cur.execute(f'DROP DATABASE IF EXISTS "{name}"')
                cur.execute(f'CREATE DATABASE "{name}"')
        yield services.database_url(names[0]), services.database_url(names[1])
    finally:
        with conn.cursor() as cur:
            for name in names:
                cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.close()


def test_upgrade_head_equals_metadata(empty_databases: tuple[str, str]) -> None:
    migrated, created = empty_databases
    upgrade(migrated)
    engine = sa.create_engine(created.replace("postgresql://", "postgresql+psycopg2://"))
    metadata.create_all(engine)
    engine.dispose()

    assert _catalog(migrated) == _catalog(created)

    engine = sa.create_engine(migrated.replace("postgresql://", "postgresql+psycopg2://"))
    try:
        with engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), metadata)
        assert diff == []
    finally:
        engine.dispose()


def test_downgrade_to_base_and_up_again(empty_databases: tuple[str, str]) -> None:
    url, _ = empty_databases
    upgrade(url)
    downgrade(url, "base")
    assert _catalog(url)["columns"] == []
    upgrade(url)
    assert {row[0] for row in _catalog(url)["columns"]} == {
        "runs",
        "steps",
        "messages",
        "checkpoints",
        "effects",
        "approvals",
        "run_attempts",
        "run_events",
        "tick_mark",
    }


def test_upgrade_from_0001_keeps_runs_in_flight_claimable(empty_databases: tuple[str, str]) -> None:
    """A run that was running before ``runs.takeovers`` existed starts from zero."""
    url, _ = empty_databases
    upgrade(url, "0001")
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg2://"))
    try:
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO runs (id, agent, status, trigger, trigger_id, claim_owner,"
                    " claim_expires_at, claim_epoch) VALUES (gen_random_uuid(), 'a', 'running',"
                    " '{}', 't', 'old-worker', now() - interval '1 minute', 4)"
                )
            )
        upgrade(url)
        with engine.connect() as conn:
            row = conn.execute(sa.text("SELECT id, takeovers FROM runs")).one()
        assert row.takeovers == 0
    finally:
        engine.dispose()
    store = PostgresStore.from_url(url)
    try:
        claim = try_claim(store, str(row.id), "new-worker", 30, max_takeovers=5)
        assert claim is not None and claim.epoch == 5
    finally:
        store.close()
