"""Schema migrations with Alembic, callable from code and from ``runwright migrate``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory

from store import revision
from store.db import db_errors, normalize_url
from store.revision import HEAD, REVISIONS, require_revision

__all__ = [
    "HEAD",
    "REVISIONS",
    "Migrated",
    "Revision",
    "current_revision",
    "require_head",
    "upgrade",
]

MIGRATIONS = Path(__file__).parent / "migrations"


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    # ConfigParser interpolation would choke on a "%" in a password.
    config.set_main_option("sqlalchemy.url", normalize_url(url).replace("%", "%%"))
    return config


@dataclass(frozen=True)
class Revision:
    id: str  # "0010", as alembic_version holds it
    name: str  # "0010_unknown_effects": its migration's file name, which says what it did


@dataclass(frozen=True)
class Migrated:
    """What :func:`upgrade` found and left: the schema's revision before and
    after (None: the database had no schema)."""

    before: Revision | None
    after: Revision | None


def upgrade(url: str, revision: str = "head") -> Migrated:
    """Bring the database at ``url`` to ``revision``; safe to run from several
    processes. A schema newer than this code is :class:`SchemaMismatch`, and
    left as it is."""
    config = alembic_config(url)
    engine = sa.create_engine(normalize_url(url), poolclass=sa.pool.NullPool)
    try:
        before = current_revision(engine)
        if before is not None and before not in REVISIONS:
            require_revision(before)  # newer than this code: say so, and touch nothing
        with db_errors():
            command.upgrade(config, revision)
        after = current_revision(engine)
    finally:
        engine.dispose()
    return Migrated(_revision(config, before), _revision(config, after))


def _revision(config: Config, found: str | None) -> Revision | None:
    if found is None:
        return None
    script = ScriptDirectory.from_config(config).get_revision(found) if found in REVISIONS else None
    return Revision(found, Path(script.path).stem if script is not None else found)


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
