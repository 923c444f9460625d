"""Alembic ``upgrade head`` on an empty database gives exactly the SQLAlchemy metadata."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from store.migrate import downgrade, upgrade
from store.models import Fence
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
        "standing_approvals",
        "schedules",
        "schedule_firings",
        "agent_versions",
        "audit",
        "datasets",
        "dataset_cases",
        "evaluations",
        "evaluation_cases",
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


# What 0012 turns from jsonb into json, with a value of each (jsonb sorts the keys).
_KEY_ORDER_COLUMNS = {
    ("approvals", "input"),
    ("effects", "input"),
    ("effects", "output"),
    ("messages", "body"),
    ("runs", "output"),
    ("runs", "state"),
    ("steps", "error"),
    ("steps", "input"),
    ("steps", "output"),
}
_WRITTEN = '{"zeta": 1, "alpha": {"yankee": 1, "bravo": 2}, "mid": 3}'


def _types(conn: sa.Connection) -> dict[tuple[str, str], str]:
    rows = conn.execute(
        sa.text(
            "SELECT table_name, column_name, data_type FROM information_schema.columns"
            " WHERE table_schema = 'public' AND data_type IN ('json', 'jsonb')"
        )
    )
    return {(r.table_name, r.column_name): r.data_type for r in rows}


def _values(conn: sa.Connection) -> dict[tuple[str, str], list[str]]:
    """Each column's value as Postgres prints it (the order of its keys)."""
    return {
        (table, column): list(
            conn.execute(sa.text(f'SELECT "{column}"::text FROM {table}')).scalars()
        )
        for table, column in sorted(_KEY_ORDER_COLUMNS)
    }


def test_0012_keeps_the_rows_0011_stored_and_goes_back(empty_databases: tuple[str, str]) -> None:
    """A database with a run in it upgrades to json and downgrades to jsonb;
    the rows 0011 wrote keep the order jsonb gave them, later ones keep theirs."""
    url, _ = empty_databases
    upgrade(url, "0011")
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg2://"))
    value = {"value": _WRITTEN}
    try:
        with engine.begin() as conn:
            run_id = conn.execute(
                sa.text(
                    "INSERT INTO runs (id, agent, status, trigger, trigger_id, output, state)"
                    " VALUES (gen_random_uuid(), 'a', 'completed', '{}', 't', :value, :value)"
                    " RETURNING id"
                ),
                value,
            ).scalar_one()
            ids = {**value, "run_id": run_id}
            conn.execute(
                sa.text(
                    "INSERT INTO steps (run_id, kind, index, name, input, output, error,"
                    " started_at) VALUES (:run_id, 'tool', 1, 'refund', :value, :value, :value,"
                    " now())"
                ),
                ids,
            )
            conn.execute(
                sa.text("INSERT INTO messages (run_id, seq, body) VALUES (:run_id, 0, :value)"),
                ids,
            )
            conn.execute(
                sa.text(
                    "INSERT INTO effects (run_id, key, tool, input, status, claim_epoch, output,"
                    " started_at) VALUES (:run_id, 'k', 'refund', :value, 'completed', 1, :value,"
                    " now())"
                ),
                ids,
            )
            conn.execute(
                sa.text(
                    "INSERT INTO approvals (approval_id, run_id, step_index, tool_call_id,"
                    " tool_name, input, expires_at, on_expire, token_id) VALUES"
                    " (gen_random_uuid(), :run_id, 1, 'c', 'refund', :value, now(), 'deny', 't')"
                ),
                ids,
            )
        with engine.connect() as conn:
            assert {c: _types(conn)[c] for c in _KEY_ORDER_COLUMNS} == dict.fromkeys(
                _KEY_ORDER_COLUMNS, "jsonb"
            )
            sorted_by_jsonb = _values(conn)
        assert sorted_by_jsonb[("runs", "output")] == [
            '{"mid": 3, "zeta": 1, "alpha": {"bravo": 2, "yankee": 1}}'
        ]

        upgrade(url)
        with engine.begin() as conn:
            types = _types(conn)
            assert {c: types[c] for c in _KEY_ORDER_COLUMNS} == dict.fromkeys(
                _KEY_ORDER_COLUMNS, "json"
            )
            assert types[("run_events", "data")] == "jsonb"
            assert _values(conn) == sorted_by_jsonb  # what jsonb sorted stays sorted
            conn.execute(sa.text("UPDATE runs SET output = :value"), value)
            assert conn.execute(sa.text("SELECT output::text FROM runs")).scalar_one() == _WRITTEN

        downgrade(url, "0011")
        with engine.connect() as conn:
            types = _types(conn)
            assert {c: types[c] for c in _KEY_ORDER_COLUMNS} == dict.fromkeys(
                _KEY_ORDER_COLUMNS, "jsonb"
            )
            assert _values(conn) == sorted_by_jsonb
    finally:
        engine.dispose()


def test_0014_keeps_a_waiting_approval_decidable_and_goes_back(
    empty_databases: tuple[str, str],
) -> None:
    """An approval that waits under 0013 is, after 0014, an approval (not a
    question) that continues on a denial, and a decision of it makes an event
    with the new fields; going back to 0013 keeps an answered question as an
    approval 0013 can read."""
    url, _ = empty_databases
    upgrade(url, "0013")
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg2://"))
    try:
        with engine.begin() as conn:
            run_id = conn.execute(
                sa.text(
                    "INSERT INTO runs (id, agent, status, trigger, trigger_id)"
                    " VALUES (gen_random_uuid(), 'a', 'waiting', '{}', 't') RETURNING id"
                )
            ).scalar_one()
            approval_id = conn.execute(
                sa.text(
                    "INSERT INTO approvals (approval_id, run_id, step_index, tool_call_id,"
                    " tool_name, input, expires_at, on_expire, token_id) VALUES"
                    " (gen_random_uuid(), :run_id, 1, 'c', 'refund', '{\"amount\": 5}',"
                    " now() + interval '1 hour', 'deny', 't') RETURNING approval_id"
                ),
                {"run_id": run_id},
            ).scalar_one()
        upgrade(url)
        with engine.begin() as conn:
            row = conn.execute(
                sa.text("SELECT kind, on_deny, for_run, decision FROM approvals")
            ).one()
            assert tuple(row) == ("approval", "continue", False, None)
            conn.execute(
                sa.text(
                    "UPDATE approvals SET decision = 'approved', decided_by = 'ada',"
                    " arguments = '{\"amount\": 4}' WHERE approval_id = :id"
                ),
                {"id": approval_id},
            )
            data = conn.execute(
                sa.text(
                    "SELECT data FROM run_events WHERE type = 'approval' ORDER BY id DESC LIMIT 1"
                )
            ).scalar_one()
            assert (data["edited"], data["arguments"], data["input"]) == (
                True,
                {"amount": 4},
                {"amount": 5},
            )
            conn.execute(sa.text("UPDATE approvals SET decision = 'answered'"))
        downgrade(url, "0013")
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT decision FROM approvals")).scalar_one() == (
                "approved"
            )
    finally:
        engine.dispose()


def test_0018_keeps_the_runs_0017_stored_and_goes_back(empty_databases: tuple[str, str]) -> None:
    """Runs stored under 0017 have no tenant, the default priority and are
    parked on nothing after 0018; a park's status event says on what, and a
    priority out of range is refused. Going back to 0017 keeps the runs, and
    their status events no longer name a limit."""
    url, _ = empty_databases
    upgrade(url, "0017")
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg2://"))
    insert = sa.text(
        "INSERT INTO runs (id, agent, status, trigger, trigger_id)"
        " VALUES (gen_random_uuid(), 'a', 'queued', '{}', :t) RETURNING id"
    )
    try:
        with engine.begin() as conn:
            run_id = str(conn.execute(insert, {"t": "t1"}).scalar_one())
        upgrade(url)
        with engine.connect() as conn:
            row = conn.execute(sa.text("SELECT tenant, priority, parked_key FROM runs")).one()
        assert tuple(row) == (None, 0, None)
        store = PostgresStore.from_url(url)
        try:
            claim = try_claim(store, run_id, "w", 30)
            assert claim is not None
            at = datetime.now(UTC) + timedelta(minutes=1)
            store.park(Fence(run_id, "w", claim.epoch), "openai/gpt-4o", at)
            assert store.events(run_id)[-1].data["parked_on"] == "openai/gpt-4o"
        finally:
            store.close()
        refused = pytest.raises(sa.exc.IntegrityError, match="runs_priority_valid")
        with refused, engine.begin() as conn:
            conn.execute(sa.text("UPDATE runs SET priority = 10"))

        downgrade(url, "0017")
        with engine.begin() as conn:
            assert conn.execute(sa.text("SELECT id, status FROM runs")).one() == (
                uuid.UUID(run_id),
                "queued",
            )
            conn.execute(sa.text("UPDATE runs SET status = 'cancelled'"))
            data = conn.execute(
                sa.text(
                    "SELECT data FROM run_events WHERE type = 'status' ORDER BY id DESC LIMIT 1"
                )
            ).scalar_one()
            assert data["status"] == "cancelled" and "parked_on" not in data
            conn.execute(insert, {"t": "t2"})
        upgrade(url)
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM runs")).scalar_one() == 2
    finally:
        engine.dispose()
