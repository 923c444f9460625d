"""Schema migrations with Alembic, callable from code and from ``runwright migrate``."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

from store.db import db_errors, normalize_url

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


def downgrade(url: str, revision: str) -> None:
    with db_errors():
        command.downgrade(alembic_config(url), revision)
