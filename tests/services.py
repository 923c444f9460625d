"""Where the tests find Postgres and Redis, and what they may touch there.

Tests touch only what they own; a developer's ``RUNWRIGHT_REDIS_URL`` may point
at data that matters.

* Redis: a server the suite starts for the session, or the one
  ``RUNWRIGHT_TEST_REDIS_URL`` gives to the tests (``tests/redis_dbs.py``).
* Postgres: what the testing kit's :mod:`runner.testing.databases` finds (the
  server ``RUNWRIGHT_TEST_DATABASE_URL`` or ``RUNWRIGHT_DATABASE_URL`` names,
  else the local stack under ``RUNWRIGHT_HOME``, default this checkout's
  ``.runwright``), with a database cloned from a migrated template for each
  test, dropping only databases its sessions made.
"""

from __future__ import annotations

import os
from pathlib import Path

from runner.testing.databases import MARK, Databases, StackUse, open_databases
from tests import leaks
from tests.redis_dbs import RedisDatabases

ROOT = Path(__file__).resolve().parent.parent

__all__ = ["MARK", "ROOT", "Services", "StackUse", "discover"]


class Services(Databases):
    """The servers of one test session: its databases, and its Redis."""

    redis_dbs: RedisDatabases | None = None  # set once the databases are prepared

    def redis_url(self) -> str:
        """A Redis database of this test's own, empty."""
        assert self.redis_dbs is not None
        return self.redis_dbs.url()

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self.redis_dbs is not None:
                self.redis_dbs.close()


# What this process's environment holds of the suite itself: Runwright's
# settings, its Python path and virtualenv, and the Django settings the
# suite's Django tests set here (DJANGO_SETTINGS_MODULE names a module of this
# checkout, which pytest-django and Celery's Django fix-up then import).
SUITES_OWN = ("RUNWRIGHT_", "PYTHON", "VIRTUAL_ENV", "DJANGO_SETTINGS_MODULE", "EXAMPLE_")


def outside_env() -> dict[str, str]:
    """The environment of a process of a project outside this checkout: this
    one's, without what belongs to the suite itself."""
    return {k: v for k, v in os.environ.items() if not k.startswith(SUITES_OWN)}


def discover(workdir: Path) -> Services:
    """The services for a test session; ``Services.close()`` undoes everything it did."""
    redis_dbs = RedisDatabases.for_tests(workdir / "redis", os.environ)
    try:
        databases = open_databases(
            os.environ, ROOT / ".runwright", on_shared=leaks.hand_over, cls=Services
        )
    except BaseException:
        redis_dbs.close()
        raise
    databases.redis_dbs = redis_dbs
    return databases
