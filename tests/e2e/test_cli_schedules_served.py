"""``runwright schedule list`` and ``show`` name the schedules whose agent no
live worker loads (docs/triggers.md): nothing fires them, and past their
catch-up window their firings are missed. The workers are read from the
records their watchdogs keep in Redis (store/workers.py)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from runner import Agent, Engine
from runner.core.coordination.leases import Leases
from runner.testing import ScriptedModel, text
from store.postgres import PostgresStore
from store.workers import WorkerInfo
from tests.e2e.clirun import rw
from tests.helpers import unique

WEEK = "604800"  # counted from the epoch: nothing falls due while the test runs


@pytest.fixture
def env(cli_env: dict[str, str]) -> dict[str, str]:
    return {**cli_env, "RUNWRIGHT_AGENTS": "tests.agents,tests.agents_triggers"}


def listed(env: dict[str, str]) -> dict[str, Any]:
    found = json.loads(rw(env, "schedule", "list", "--json").stdout)["schedules"]
    return {s["name"]: s for s in found}


def test_a_schedule_no_live_worker_serves_is_named_so(
    env: dict[str, str], pg_store: PostgresStore, leases: Leases
) -> None:
    rw(env, "schedule", "add", "pulse", "--agent", "triggered_quick", "--every", WEEK)
    # A schedule made while the deployment loaded an agent it has since dropped.
    retired = unique("retired")
    Agent(name=retired, model=ScriptedModel(retired, lambda request: text("ok")).model)
    engine = Engine(pg_store, enqueue=None)
    try:
        engine.schedules.create("report", retired, every=int(WEEK))
    finally:
        engine.close()
    leases.mark_worker(
        WorkerInfo("worker-1", seen_at=time.time(), agents=("triggered_quick",)), 120
    )

    lines = {line.split()[0]: line for line in rw(env, "schedule", "list").stdout.splitlines()}
    assert f"not served: no live worker loads agent {retired!r}" in lines["report"]
    assert "not served" not in lines["pulse"]
    found = listed(env)
    assert (found["pulse"]["served"], found["pulse"]["unserved"]) == (True, None)
    assert found["report"]["served"] is False
    assert found["report"]["unserved"] == f"no live worker loads agent {retired!r}"

    shown = rw(env, "schedule", "show", "report").stdout
    assert f"served     no: no live worker loads agent {retired!r}" in shown
    assert "served     yes" in rw(env, "schedule", "show", "pulse").stdout
    assert (
        json.loads(rw(env, "schedule", "show", "report", "--json").stdout)["schedule"]["served"]
        is False
    )

    # A worker that loads it comes up: it is served.
    leases.mark_worker(WorkerInfo("worker-2", seen_at=time.time(), agents=(retired,)), 120)
    assert listed(env)["report"]["served"] is True
