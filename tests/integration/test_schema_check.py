"""Every entry point says in one line that the schema is missing or behind
(issue 10, item 4), and a process on a schema newer than its code refuses to
start."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from alembic.script import ScriptDirectory

from runner import Engine
from store.errors import SchemaMismatch
from store.migrate import HEAD, REVISIONS, alembic_config, require_head
from tests.services import ROOT, Services

SECRET_KEY = "test:" + "s" * 40


@pytest.fixture
def empty_database(services: Services) -> Iterator[str]:
    """A database of this test's own with no schema at all."""
    name = services.new_database(empty=True)
    yield services.database_url(name)
    services.drop_database(name)


def test_head_is_alembics_head() -> None:
    script = ScriptDirectory.from_config(alembic_config("postgresql://unused/db"))
    assert script.get_current_head() == HEAD
    ordered = [rev.revision for rev in reversed(list(script.walk_revisions()))]
    assert tuple(ordered) == REVISIONS


def _cli(url: str, redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "RUNWRIGHT_DATABASE_URL": url,
        "RUNWRIGHT_REDIS_URL": redis_url,
        "RUNWRIGHT_SECRET_KEY": SECRET_KEY,
        "PYTHONPATH": str(ROOT),
    }
    return subprocess.run(
        [sys.executable, "-m", "runner.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


def test_an_unmigrated_database_is_one_line_then_migrate_fixes_it(
    empty_database: str, redis_url: str
) -> None:
    engine = sa.create_engine(empty_database.replace("postgresql://", "postgresql+psycopg2://"))
    try:
        with pytest.raises(SchemaMismatch, match="runwright migrate"):
            require_head(engine)
    finally:
        engine.dispose()
    for args in (["runs"], ["start", "triage", "--payload", "{}"]):
        done = _cli(empty_database, redis_url, *args)
        assert done.returncode == 1
        assert done.stderr.strip().count("\n") == 0, done.stderr
        assert "runwright migrate" in done.stderr and "Traceback" not in done.stderr
    migrated = _cli(empty_database, redis_url, "migrate")
    assert migrated.returncode == 0, migrated.stderr
    assert _cli(empty_database, redis_url, "runs").returncode == 0


def test_a_schema_behind_or_ahead_refuses_the_engine(
    database_url: str, monkeypatch: pytest.MonkeyPatch, redis_url: str
) -> None:
    monkeypatch.setenv("RUNWRIGHT_DATABASE_URL", database_url)
    monkeypatch.setenv("RUNWRIGHT_REDIS_URL", redis_url)
    monkeypatch.setenv("RUNWRIGHT_SECRET_KEY", SECRET_KEY)
    Engine.from_env(enqueue=None).close()  # at head: fine
    engine = sa.create_engine(database_url.replace("postgresql://", "postgresql+psycopg2://"))
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("UPDATE alembic_version SET version_num = '9999'"))
        with pytest.raises(SchemaMismatch, match="newer than this code"):
            Engine.from_env(enqueue=None)
        with engine.begin() as conn:
            conn.execute(
                sa.text("UPDATE alembic_version SET version_num = :r"), {"r": REVISIONS[0]}
            )
        with pytest.raises(SchemaMismatch, match="behind"):
            Engine.from_env(enqueue=None)
    finally:
        engine.dispose()
