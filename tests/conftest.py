from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from pathlib import Path

from runner.core.coordination.leases import Leases, connect
from runner.core.engine.engine import Engine
from runner.core.settings import Settings
from store.db import make_engine
from store.postgres import PostgresStore
from tests.leaks import Watch, describe, stop
from tests.services import ROOT, Services, discover

_watch = Watch()


def pytest_sessionstart(session: pytest.Session) -> None:
    _watch.start()


@pytest.hookimpl(trylast=True)  # after pytest's own hook has torn down the session fixtures
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Fail the session if it leaves a process running (and end those processes)."""
    # Only if some test made it (getbasetemp() would make one now, for nothing).
    basetemp = getattr(getattr(session.config, "_tmp_path_factory", None), "_basetemp", None)
    if basetemp is not None:
        _watch.roots.append(Path(basetemp).resolve())
    left = _watch.wait_for_leftovers()
    if not left:
        return
    lines = [describe(proc) for proc in left]
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_sep("=", "processes this test session left running", red=True)
        for line in lines:
            reporter.write_line(line)
    else:
        print("processes this test session left running:", *lines, sep="\n")
    stop(left)
    if session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    """Postgres and Redis for the session: see tests/services.py for what they touch."""
    found = discover(tmp_path_factory.mktemp("services"))
    yield found
    found.close()


@pytest.fixture(scope="session")
def runwright_databases(services: Services) -> Services:
    """The testing kit's fixtures (runner/testing/plugin.py) clone the
    suite's own template: one per session, not two."""
    return services


@pytest.fixture
def database_url(runwright_database_url: str) -> str:
    """A fresh, migrated database of this test's own (the kit's fixture)."""
    return runwright_database_url


@pytest.fixture
def pg_store(database_url: str) -> Iterator[PostgresStore]:
    store = PostgresStore(make_engine(database_url, pool_size=5))
    yield store
    store.close()


@pytest.fixture
def redis_url(services: Services) -> str:
    """A Redis database of this test's own, empty, on a server the suite owns."""
    return services.redis_url()


@pytest.fixture
def leases(redis_url: str) -> Iterator[Leases]:
    client = connect(redis_url)
    yield Leases(client)
    client.close()


@pytest.fixture(autouse=True)
def _clean_process_state() -> Iterator[None]:
    """Fault points and the drain flag are per process: reset them after each test
    (a drain is final for a worker, which exits; a test's process goes on)."""
    yield
    from runner.core import faults
    from runner.core.runtime import runtime

    faults.disarm()
    runtime()._draining = False


@pytest.fixture
def settings() -> Settings:
    return Settings(
        lease_ttl_seconds=3,
        secret_key="test:test-secret-for-runwright-tests-only",
        notify_backoff_seconds=5,
    )


@pytest.fixture
def engine(pg_store: PostgresStore, leases: Leases, settings: Settings) -> Iterator[Engine]:
    """An engine on this test's database, with Redis leases, as workers run it."""
    import tests.agents  # noqa: F401  (registers the shared agents)

    made = Engine(
        pg_store, leases=leases, settings=settings, model_retries=2, model_backoff_seconds=0.01
    )
    yield made
    made.close()


@pytest.fixture
def proc_env(database_url: str, redis_url: str, tmp_path: Path) -> dict[str, str]:
    """Environment for subprocesses that execute runs against this test's services."""
    return {
        **os.environ,
        "RUNWRIGHT_DATABASE_URL": database_url,
        "RUNWRIGHT_REDIS_URL": redis_url,
        "RUNWRIGHT_LEASE_TTL_SECONDS": "1",
        "RUNWRIGHT_SECRET_KEY": "test:test-secret-for-runwright-tests-only",
        "RUNWRIGHT_SCRIPTED_JOURNAL": str(tmp_path / "journal.jsonl"),
        "RUNWRIGHT_TEST_EFFECT_LOG": str(tmp_path / "effects.jsonl"),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "PYTHONPATH": str(ROOT),
    }


@pytest.fixture(scope="session")
def django_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Configure Django once per process (the example project's settings,
    which mount the console), with a throwaway SQLite file for Django's own
    tables; Runwright's runs stay in the test's store."""
    import django
    from django.core.management import call_command
    from django.db import connections

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "examples.django_app.settings")
    os.environ["EXAMPLE_DJANGO_DB"] = str(tmp_path_factory.mktemp("django") / "db.sqlite3")
    # Read when the project's URLs are first loaded (its webhook route).
    os.environ["EXAMPLE_WEBHOOK_SECRET"] = EXAMPLE_WEBHOOK_SECRET
    django.setup()
    call_command("migrate", verbosity=0)
    yield
    connections.close_all()


# The example apps' webhook secret in the tests (examples/web.py).
EXAMPLE_WEBHOOK_SECRET = "whsec_" + "dGVzdC1vbmx5LXdlYmhvb2stc2VjcmV0LWZvci1leGFtcGxlcw=="


@pytest.fixture
def browser() -> Iterator[Any]:
    """Headless Chromium for the page tests: Debian's ``chromium`` and
    ``chromedriver`` (``make browser`` installs them), driven by selenium
    (imported here, not by every test), keeping the browser's console log
    (tests read CSP refusals from it)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    assert binary and driver, "Debian's chromium and chromedriver are needed: run `make browser`"
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    made = webdriver.Chrome(options=options, service=Service(driver))
    try:
        yield made
    finally:
        made.quit()


def csp_refusals(browser: Any) -> list[str]:
    """What the page's Content-Security-Policy refused, from the browser's log."""
    return [
        entry["message"]
        for entry in browser.get_log("browser")
        if "Content Security Policy" in entry.get("message", "")
    ]
