"""The unit tier (``make test-fast``): no subprocess and no service. A unit
test that starts a process or opens a network connection fails at once,
naming what it tried, so that a test needing either lives in
tests/integration (docs/testing.md, "Tiers")."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest


class NotAUnitTest(Exception):
    """A unit test reached for a process or a service."""


# The suite's fixtures that start or reach a service (tests/conftest.py).
SERVICE_FIXTURES = frozenset(
    {"services", "database_url", "pg_store", "redis_url", "leases", "engine", "proc_env",
     "cli_env", "runwright_database_url", "runwright_engine"}
)  # fmt: skip


@pytest.fixture(autouse=True)
def _no_processes_or_services(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    wanted = sorted(SERVICE_FIXTURES & set(request.fixturenames))
    if wanted:
        raise NotAUnitTest(f"a unit test asked for {', '.join(wanted)}: move it to integration")

    def no_process(self: Any, args: Any, *rest: Any, **kwargs: Any) -> None:
        raise NotAUnitTest(f"a unit test started a process ({args!r}): move it to integration")

    real_connect = socket.socket.connect

    def no_service(self: socket.socket, address: Any) -> None:
        if self.family in (socket.AF_INET, socket.AF_INET6):
            raise NotAUnitTest(f"a unit test connected to {address!r}: move it to integration")
        real_connect(self, address)

    def no_database(*args: Any, **kwargs: Any) -> None:
        raise NotAUnitTest("a unit test connected to Postgres: move it to integration")

    import psycopg2

    monkeypatch.setattr(psycopg2, "connect", no_database)
    monkeypatch.setattr(subprocess.Popen, "__init__", no_process)
    monkeypatch.setattr(socket.socket, "connect", no_service)
    yield
