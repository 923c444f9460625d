"""Tests that ``test_test_isolation.py`` runs as a test session of their own:
``pytest tests/integration/isolation_probe.py``. The suite does not collect this
file (its name does not start with ``test_``).

Each test notes what it was given in the file ``PROBE_LOG`` names.
"""

from __future__ import annotations

import json
import os
import subprocess

import psycopg2
import pytest
import redis

from runner.core.coordination.leases import Leases
from tests.redis_dbs import MARKER_KEY


def _note(entry: dict[str, object]) -> None:
    with open(os.environ["PROBE_LOG"], "a") as log:
        log.write(json.dumps(entry) + "\n")


# More tests than a Redis server has databases by default, so every number comes round.
@pytest.mark.parametrize("n", range(20))
def test_fill(n: int, redis_url: str, leases: Leases, database_url: str) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        assert set(client.keys("*")) <= {MARKER_KEY}  # given empty
        client.set(f"probe:{n}", "written by the test")
        assert leases.acquire(f"run-{n}", "probe", 10_000)
    finally:
        client.close()
    conn = psycopg2.connect(database_url)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT count(*) FROM runs")  # the database is migrated
            row = cur.fetchone()
            assert row is not None and row[0] == 0
    finally:
        conn.close()
    _note({"redis": redis_url, "database": database_url})


_started: list[subprocess.Popen[bytes]] = []  # held, so that nothing reaps them early


def test_leak() -> None:
    """Starts two processes and forgets them: a child, and a daemon (as redis-server is)."""
    child = subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL)
    _started.append(child)
    daemon = subprocess.run(
        ["sh", "-c", "sleep 600 >/dev/null 2>&1 & echo $!"],
        capture_output=True,
        text=True,
        check=True,
    )
    _note({"leaked": [child.pid, int(daemon.stdout.strip())]})
