"""``runwright watch`` on a run parked on a limit: its status event reads
"queued (waiting: rate_limit on KEY until TIME)", from the feed on the
test's own Postgres and Redis."""

from __future__ import annotations

from datetime import UTC

import pytest

from runner.cli.follow import follow
from runner.core.settings import Settings
from store.models import RunStatus
from store.postgres import PostgresStore
from tests.helpers import parked_run


def test_a_parked_run_s_status_line_names_its_key_and_time(
    pg_store: PostgresStore, database_url: str, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run = parked_run(pg_store, "openai/gpt-busy", tenant="acme")
    assert run.parked_until is not None
    until = run.parked_until.astimezone(UTC)
    settings = Settings(database_url=database_url, redis_url=redis_url)
    assert follow(settings, run.id, 0.2, False) is RunStatus.QUEUED
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == (
        f"-- queued (waiting: rate_limit on openai/gpt-busy until {until:%Y-%m-%d %H:%M:%S} UTC)"
    ), lines
