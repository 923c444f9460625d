"""``runwright schedule ...`` and ``runwright webhook secret`` through the real
command line (docs/triggers.md): a schedule made, listed, shown with its next
firings and its last ones, paused, resumed, triggered and deleted; a bad cron
expression, zone or agent is one line and writes nothing."""

from __future__ import annotations

import base64
import json
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import sqlalchemy as sa

from store.postgres import PostgresStore
from tests.e2e.clirun import refused, rw
from tests.helpers import snapshot


@pytest.fixture
def env(cli_env: dict[str, str]) -> dict[str, str]:
    return {**cli_env, "RUNWRIGHT_AGENTS": "tests.agents,tests.agents_triggers"}


def document(env: dict[str, str], *args: str) -> Any:
    return json.loads(rw(env, *args, "--json").stdout)


def schedules_rows(store: PostgresStore) -> Any:
    with store.engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT * FROM schedules")).all()
    return snapshot(store), rows


def test_a_schedule_through_the_command_line(env: dict[str, str]) -> None:
    made = document(
        env,
        "schedule",
        "add",
        "nightly",
        "--agent",
        "triggered_quick",
        "--cron",
        "30 2 * * *",
        "--tz",
        "Europe/Berlin",
        "--payload",
        '{"report": "daily"}',
        "--key",
        "team=ops",
        "--overlap",
        "buffer_one",
    )["schedule"]
    assert (made["cron"], made["timezone"], made["overlap"]) == (
        "30 2 * * *",
        "Europe/Berlin",
        "buffer_one",
    )
    assert made["payload"] == {"report": "daily"} and made["keys"] == {"team": "ops"}
    # A week, counted from the epoch: no firing falls due while this test runs
    # (a minute could, on a busy machine, between the add and the tick below).
    rw(env, "schedule", "add", "pulse", "--agent", "triggered_quick", "--every", "604800")
    listed = rw(env, "schedule", "list").stdout
    assert "nightly  triggered_quick  cron '30 2 * * *' (Europe/Berlin)  buffer_one  next" in listed
    assert "pulse  triggered_quick  every 604800 s  skip  next" in listed

    shown = document(env, "schedule", "show", "nightly", "--count", "3")
    upcoming = shown["schedule"]["next_firings"]
    berlin = ZoneInfo("Europe/Berlin")
    local = [datetime.fromisoformat(t).astimezone(berlin).strftime("%H:%M") for t in upcoming]
    assert len(local) == 3 and set(local) <= {"02:30", "03:00"}  # 03:00 on a spring-forward day
    assert shown["firings"] == []

    assert "schedule nightly paused; paused" in rw(env, "schedule", "pause", "nightly").stdout
    assert document(env, "schedule", "show", "nightly")["schedule"]["next_firings"] == []
    assert "resumed; next" in rw(env, "schedule", "resume", "nightly").stdout

    fired = document(env, "schedule", "trigger", "pulse")["firing"]
    assert fired["outcome"] == "triggered" and fired["run_id"]
    lines = rw(env, "schedule", "show", "pulse").stdout
    assert f"triggered  run {fired['run_id']} (queued)" in lines
    assert "fired 0 (0 firings)" in rw(env, "tick").stdout  # nothing is due yet

    assert "schedule pulse deleted" in rw(env, "schedule", "delete", "pulse").stdout
    assert "no schedule named 'pulse'" in refused(env, "schedule", "show", "pulse")
    runs = json.loads(rw(env, "runs", "--json").stdout)["runs"]
    assert [r["id"] for r in runs] == [fired["run_id"]]  # its run stays


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--cron", "61 * * * *"], "Bad minute"),
        (["--cron", "0 * * * *", "--tz", "Mars/Olympus"], "unknown time zone"),
        (["--every", "soon"], "--every takes a number of seconds"),
        (["--every", "0.1"], "every must be from 1 s"),
        ([], "not both or neither"),
        (["--every", "60", "--payload", "{nope"], "--payload"),
        (["--every", "60", "--overlap", "queue"], "overlap must be one of"),
    ],
)
def test_a_bad_schedule_is_one_line_and_writes_nothing(
    env: dict[str, str], pg_store: PostgresStore, args: list[str], said: str
) -> None:
    before = schedules_rows(pg_store)
    line = refused(env, "schedule", "add", "bad", "--agent", "triggered_quick", *args)
    assert said in line
    assert schedules_rows(pg_store) == before


def test_an_unknown_agent_is_refused(env: dict[str, str], pg_store: PostgresStore) -> None:
    before = schedules_rows(pg_store)
    line = refused(env, "schedule", "add", "x", "--agent", "nobody", "--every", "60")
    assert "no agent named 'nobody'" in line
    assert schedules_rows(pg_store) == before


def test_webhook_secret_prints_a_new_whsec_secret(env: dict[str, str]) -> None:
    first = rw(env, "webhook", "secret").stdout.strip()
    second = rw(env, "webhook", "secret").stdout.strip()
    assert first.startswith("whsec_") and first != second
    assert len(base64.b64decode(first.removeprefix("whsec_"), validate=True)) == 32
