"""Runwright's Postgres as a database of a Django project, read-only to Django.

Runwright's tables belong to its Alembic migrations. Django reads them
(the admin, through the unmanaged models of this app) and never migrates
them: :class:`RunwrightRouter` keeps every Django migration off that
database. Importable from settings: nothing here needs Django set up (only imported).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

from runner.core.errors import ConfigurationError

APP_LABEL = "runwright_console"
ALIAS_SETTING = "RUNWRIGHT_CONSOLE_DATABASE"
DEFAULT_ALIAS = "runwright"


class ConsoleNotConfigured(ConfigurationError, ImproperlyConfigured):
    """The Runwright console's Django settings are not valid (Django reports
    it as ImproperlyConfigured)."""


_SCHEMES = {"postgres", "postgresql", "postgresql+psycopg2", "postgresql+psycopg"}


def runwright_database(url: str) -> dict[str, Any]:
    """The ``DATABASES`` entry of Runwright's Postgres at ``url`` (the value of
    ``RUNWRIGHT_DATABASE_URL``: ``postgresql://user:password@host:5432/name``,
    with libpq options such as ``?sslmode=require``). Raises
    :class:`ConfigurationError` for a URL of another kind."""
    parts = urlsplit(url)
    if parts.scheme not in _SCHEMES:
        raise ConfigurationError("the Runwright database URL must be a postgresql:// URL")
    try:
        port = parts.port
    except ValueError:
        raise ConfigurationError("the Runwright database URL has an invalid port") from None
    name = unquote(parts.path.lstrip("/"))
    if not name:
        raise ConfigurationError("the Runwright database URL must name a database")
    options = dict(parse_qsl(parts.query, keep_blank_values=True))
    # libpq's ?host= (a socket directory) is Django's HOST, like the URL's host.
    host = options.pop("host", None) or unquote(parts.hostname or "")
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": name,
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": host,
        "PORT": "" if port is None else str(port),
        "OPTIONS": options,
        # Django only reads here; a view never holds a transaction open on it.
        "ATOMIC_REQUESTS": False,
    }


def database_alias() -> str:
    """The alias the console's models read from: the setting
    ``RUNWRIGHT_CONSOLE_DATABASE`` (default ``"runwright"``), or ``"default"``
    when that alias is not configured and the setting was not given (a project
    that keeps Runwright's tables in its own database)."""
    from django.conf import settings
    from django.db import DEFAULT_DB_ALIAS

    alias = getattr(settings, ALIAS_SETTING, None)
    if alias is None:
        return DEFAULT_ALIAS if DEFAULT_ALIAS in settings.DATABASES else DEFAULT_DB_ALIAS
    if alias not in settings.DATABASES:
        raise ConsoleNotConfigured(f"{ALIAS_SETTING} names {alias!r}, which is not in DATABASES")
    return str(alias)


def _ours(model: Any) -> bool:
    return bool(model._meta.app_label == APP_LABEL)


class RunwrightRouter:
    """A Django database router (``DATABASE_ROUTERS``): the console's models
    live in Runwright's database, and no Django migration runs there."""

    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        return database_alias() if _ours(model) else None

    def db_for_write(self, model: Any, **hints: Any) -> str | None:
        return database_alias() if _ours(model) else None

    def allow_relation(self, first: Any, second: Any, **hints: Any) -> bool | None:
        return True if _ours(first) and _ours(second) else None

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool | None:
        from django.db import DEFAULT_DB_ALIAS

        alias = database_alias()
        if alias != DEFAULT_DB_ALIAS and db == alias:
            return False  # Runwright's schema is its own migrations'
        return None
