"""Where the tests find Postgres and Redis.

The environment names them (``RUNWRIGHT_DATABASE_URL``, ``RUNWRIGHT_REDIS_URL``),
as CI does; otherwise the tests start the local stack. Each test gets a database
cloned from a migrated template and a Redis database number of its own.
"""

from __future__ import annotations

import itertools
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import psycopg2
import redis
from sqlalchemy.engine import make_url

from store.local import LocalStack
from store.migrate import upgrade

ROOT = Path(__file__).resolve().parent.parent
# Redis databases 1..LAST are handed out to tests in turn; 0 is never touched.
_REDIS_DBS = itertools.cycle(range(1, 16))
_DB_COUNTER = itertools.count(1)
_lock = threading.Lock()


@dataclass
class Services:
    server_url: str  # a Postgres URL whose database is "postgres"
    redis_base: str  # a Redis URL without a database number
    template: str

    def admin(self) -> psycopg2.extensions.connection:
        conn = psycopg2.connect(self.server_url.replace("postgresql+psycopg2", "postgresql"))
        conn.autocommit = True
        return conn

    def database_url(self, name: str) -> str:
        return str(make_url(self.server_url).set(database=name).render_as_string(False))

    def new_database(self) -> str:
        with _lock:
            name = f"rw_t_{os.getpid()}_{next(_DB_COUNTER)}"
        conn = self.admin()
        try:
            with conn.cursor() as cur:
                cur.execute(f'CREATE DATABASE "{name}" TEMPLATE "{self.template}"')
        finally:
            conn.close()
        return name

    def drop_database(self, name: str) -> None:
        conn = self.admin()
        try:
            with conn.cursor() as cur:
                cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            conn.close()

    def redis_url(self) -> str:
        with _lock:
            db = next(_REDIS_DBS)
        url = f"{self.redis_base}/{db}"
        client = redis.Redis.from_url(url)
        try:
            client.flushdb()  # this test's own database only
        finally:
            client.close()
        return url


def discover() -> Services:
    database_url = os.environ.get("RUNWRIGHT_DATABASE_URL")
    redis_url = os.environ.get("RUNWRIGHT_REDIS_URL")
    if not database_url or not redis_url:
        urls = LocalStack(ROOT / ".runwright").up()
        database_url = database_url or urls.database_url
        redis_url = redis_url or urls.redis_url
    server_url = str(make_url(database_url).set(database="postgres").render_as_string(False))
    parsed = make_url(redis_url.replace("redis://", "postgresql://", 1))
    redis_base = f"redis://{parsed.host or '127.0.0.1'}:{parsed.port or 6379}"
    services = Services(server_url, redis_base, template=f"rw_tmpl_{os.getpid()}")
    _drop_stale(services)
    conn = services.admin()
    try:
        with conn.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{services.template}" WITH (FORCE)')
            cur.execute(f'CREATE DATABASE "{services.template}"')
    finally:
        conn.close()
    upgrade(services.database_url(services.template))
    return services


def _drop_stale(services: Services) -> None:
    """Databases left behind by test sessions that died."""
    conn = services.admin()
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT datname FROM pg_database WHERE datname LIKE 'rw\\_t\\_%'"
                " OR datname LIKE 'rw\\_tmpl\\_%'"
            )
            for (name,) in cur.fetchall():
                pid = int(name.split("_")[2])
                if pid != os.getpid() and not _alive(pid):
                    cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        conn.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
