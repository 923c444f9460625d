"""Schema migrations with Alembic, callable from code and from ``runwright migrate``."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config

from store import revision
from store.db import db_errors, normalize_url
from store.revision import HEAD, REVISIONS, require_revision

__all__ = ["HEAD", "REVISIONS", "current_revision", "require_head", "upgrade"]

MIGRATIONS = Path(__file__).parent / "migrations"


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
        return revision.current_revision(lambda sql: conn.execute(sa.text(sql)).scalar())


def require_head(engine: sa.Engine) -> None:
    """Raise :class:`SchemaMismatch`, with one line saying what to do, unless the
    database's schema is the one this code was written for."""
    require_revision(current_revision(engine))
