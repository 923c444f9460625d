"""Schema migrations with Alembic, callable from code and from ``runwright migrate``."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config

from store.db import db_errors, normalize_url
from store.errors import SchemaMismatch

MIGRATIONS = Path(__file__).parent / "migrations"
# The newest migration. Kept here so that checking a database costs one query
# rather than loading every migration script; a test pins it to Alembic's head.
HEAD = "0001"
# Revisions in order, oldest first, to tell "behind" from "ahead".
REVISIONS = ("0001",)


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    # ConfigParser interpolation would choke on a "%" in a password.
    config.set_main_option("sqlalchemy.url", normalize_url(url).replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> None:
    """Bring the database at ``url`` to ``revision``; safe to run from several processes."""
    with db_errors():
        command.upgrade(alembic_config(url), revision)


def upgrade_if_behind(url: str) -> None:
    """``upgrade(url)`` unless the schema is already at head (one query then)."""
    engine = sa.create_engine(normalize_url(url), poolclass=sa.pool.NullPool)
    try:
        current = current_revision(engine)
    finally:
        engine.dispose()
    if current != HEAD:
        upgrade(url)


def downgrade(url: str, revision: str) -> None:
    with db_errors():
        command.downgrade(alembic_config(url), revision)


def current_revision(engine: sa.Engine) -> str | None:
    """The database's schema revision; None if it was never migrated."""
    with db_errors(), engine.connect() as conn:
        exists = conn.execute(sa.text("SELECT to_regclass('alembic_version')")).scalar()
        if exists is None:
            return None
        return conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()


def require_head(engine: sa.Engine) -> None:
    """Raise :class:`SchemaMismatch`, with one line saying what to do, unless the
    database's schema is the one this code was written for."""
    current = current_revision(engine)
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
