"""Runwright's pytest plugin, registered through the ``pytest11`` entry point:
installing Runwright is all it takes.

Fixtures:

- ``runwright_engine``: a :class:`~runner.testing.kit.TestEngine` on a fresh
  database of the test's own; real model calls are blocked while it lives.
- ``runwright_database_url``: that fresh database's URL, for a test that
  builds its own engine.

Marker: ``@pytest.mark.runwright_allow_model_requests`` lets a test's agents
call real providers (so does ``RUNWRIGHT_ALLOW_MODEL_REQUESTS=1``).

The databases are cloned from one migrated template per test session, on the
server ``RUNWRIGHT_TEST_DATABASE_URL`` or ``RUNWRIGHT_DATABASE_URL`` names,
else on the local stack's embedded Postgres (runner/testing/databases.py).
This module imports only pytest and the standard library until a fixture is
used, so a pytest session that never asks for one pays nothing.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from runner.testing.databases import Databases
    from runner.testing.kit import TestEngine

ALLOW_MARKER = "runwright_allow_model_requests"
ALLOW_ENV = "RUNWRIGHT_ALLOW_MODEL_REQUESTS"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{ALLOW_MARKER}: let this test's agents call real model providers"
    )
    # litellm must not fetch its price list from the network in a test.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


@pytest.fixture(scope="session")
def runwright_databases(pytestconfig: pytest.Config) -> Iterator[Databases]:
    """The session's test databases (a migrated template; one clone per test)."""
    from runner.testing.databases import Databases, open_databases

    databases = open_databases(os.environ, pytestconfig.rootpath / ".runwright", cls=Databases)
    yield databases
    databases.close()


@pytest.fixture
def runwright_database_url(runwright_databases: Databases) -> Iterator[str]:
    """A fresh, migrated database of this test's own, dropped after it."""
    name = runwright_databases.new_database()
    yield runwright_databases.database_url(name)
    runwright_databases.drop_database(name)


@pytest.fixture
def runwright_engine(
    runwright_database_url: str, request: pytest.FixtureRequest
) -> Iterator[TestEngine]:
    """An engine that runs this test's runs in-process, on its own database."""
    from runner.testing.kit import TestEngine
    from runner.testing.requests import block_model_requests

    allowed = request.node.get_closest_marker(ALLOW_MARKER) is not None or os.environ.get(
        ALLOW_ENV, ""
    ).lower() in ("1", "true", "yes")
    with contextlib.ExitStack() as stack:
        if not allowed:
            stack.enter_context(block_model_requests())
        engine = stack.enter_context(TestEngine(runwright_database_url))
        yield engine
