"""Alembic environment: online migrations only, serialized by an advisory lock."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context

from store.schema import metadata

# Any constant works; it only has to be the same in every process that migrates.
_MIGRATION_LOCK = 0x52574D49


def run_migrations_online() -> None:
    url = context.config.get_main_option("sqlalchemy.url")
    assert url is not None, "store.migrate sets sqlalchemy.url"
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    with engine.connect() as connection:
        connection.execute(sa.text("SELECT pg_advisory_lock(:key)"), {"key": _MIGRATION_LOCK})
        connection.commit()
        try:
            context.configure(connection=connection, target_metadata=metadata)
            with context.begin_transaction():
                context.run_migrations()
        finally:
            connection.execute(sa.text("SELECT pg_advisory_unlock(:key)"), {"key": _MIGRATION_LOCK})
            connection.commit()
    engine.dispose()


if context.is_offline_mode():
    raise SystemExit("Runwright migrations run online only: use `runwright migrate`.")
run_migrations_online()
