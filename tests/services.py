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
