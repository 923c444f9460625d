"""``runwright migrate`` says what it did (issue 26, item 12): created the
schema, found it at head, or migrated it from one revision to another, each
named by its migration's file; ``--json`` says the same; a schema newer than
the code is refused in one line and left as it is."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import psycopg2
import pytest

from runner.core.settings import Settings
from store.migrate import HEAD, REVISIONS, downgrade
from store.summary import libpq_url
from tests.e2e.clirun import make_cli_env, refused, rw
from tests.services import ROOT, Services

VERSIONS = ROOT / "store" / "migrations" / "versions"


def name(revision: str) -> str:
    """``0010_unknown_effects``: the revision's migration file, without ``.py``."""
    [path] = VERSIONS.glob(f"{revision}_*.py")
    return path.stem


@pytest.fixture
def empty_database(services: Services) -> Iterator[str]:
    """A database of this test's own with no schema at all."""
    created = services.new_database(empty=True)
    yield services.database_url(created)
    services.drop_database(created)


def version(url: str) -> str:
    conn = psycopg2.connect(libpq_url(url))
    try:
        with conn.cursor() as cursor:
            cursor.execute("SELECT version_num FROM alembic_version")
            row = cursor.fetchone()
            assert row is not None
            return str(row[0])
    finally:
        conn.close()


def test_migrate_says_from_which_revision_to_which(
    empty_database: str, redis_url: str, tmp_path: Path, settings: Settings
) -> None:
    env = make_cli_env(empty_database, redis_url, tmp_path, settings)
    head, previous = name(HEAD), name(REVISIONS[-2])
    assert rw(env, "migrate").stdout == f"created the schema at {head}\n"
    assert rw(env, "migrate").stdout == f"schema is already at {head}\n"
    downgrade(empty_database, REVISIONS[-2])
    assert rw(env, "migrate").stdout == f"migrated from {previous} to {head}\n"
    assert version(empty_database) == HEAD

    downgrade(empty_database, REVISIONS[-2])
    assert json.loads(rw(env, "migrate", "--json").stdout) == {
        "from": {"revision": REVISIONS[-2], "name": previous},
        "to": {"revision": HEAD, "name": head},
        "migrated": True,
    }
    assert json.loads(rw(env, "migrate", "--json").stdout) == {
        "from": {"revision": HEAD, "name": head},
        "to": {"revision": HEAD, "name": head},
        "migrated": False,
    }


def test_migrate_creates_the_schema_as_json(
    empty_database: str, redis_url: str, tmp_path: Path, settings: Settings
) -> None:
    env = make_cli_env(empty_database, redis_url, tmp_path, settings)
    assert json.loads(rw(env, "migrate", "--json").stdout) == {
        "from": None,
        "to": {"revision": HEAD, "name": name(HEAD)},
        "migrated": True,
    }


def test_migrate_refuses_a_schema_newer_than_the_code(
    database_url: str, redis_url: str, tmp_path: Path, settings: Settings
) -> None:
    conn = psycopg2.connect(libpq_url(database_url))
    conn.autocommit = True
    try:
        with conn.cursor() as cursor:
            cursor.execute("UPDATE alembic_version SET version_num = '9999'")
    finally:
        conn.close()
    env = make_cli_env(database_url, redis_url, tmp_path, settings)
    line = refused(env, "migrate")
    assert "newer than this code" in line and "9999" in line, line
    assert version(database_url) == "9999"
