"""Which schema revision this code needs, checked without loading Alembic or
SQLAlchemy, so that every entry point (even ``runwright runs``) can afford it."""

from __future__ import annotations

from collections.abc import Callable

from store.errors import SchemaMismatch

# The newest migration; a test pins it (and the order) to Alembic's scripts.
HEAD = "0022"
# Revisions in order, oldest first, to tell "behind" from "ahead".
REVISIONS = (
    "0001", "0002", "0003", "0004", "0005", "0006", "0007", "0008", "0009", "0010", "0011",
    "0012", "0013", "0014", "0015", "0016", "0017", "0018", "0019", "0020", "0021",
    "0022",
)  # fmt: skip

# Two queries (Postgres plans the second only if the table exists).
HAS_VERSION_TABLE_SQL = "SELECT to_regclass('alembic_version') IS NOT NULL"
VERSION_SQL = "SELECT max(version_num) FROM alembic_version"


def current_revision(scalar: Callable[[str], object]) -> str | None:
    """The database's revision through ``scalar(sql)``; None if never migrated."""
    if not scalar(HAS_VERSION_TABLE_SQL):
        return None
    value = scalar(VERSION_SQL)
    return None if value is None else str(value)


def require_revision(current: str | None) -> None:
    """Raise :class:`SchemaMismatch` unless ``current`` is :data:`HEAD`."""
    if current == HEAD:
        return
    if current is None:
        raise SchemaMismatch(
            "the database has no Runwright schema; run `runwright migrate` to create it"
        )
    if current in REVISIONS:
        raise SchemaMismatch(
            f"the database schema is behind this code (at {current}, needs {HEAD}); "
            "run `runwright migrate`"
        )
    raise SchemaMismatch(
        f"the database schema ({current}) is newer than this code (which knows up to {HEAD}); "
        "deploy the newer code to this process"
    )
