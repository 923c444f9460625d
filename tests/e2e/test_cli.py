"""Every command through the real ``runwright`` entry point, bad input included."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from runner import Engine
from store.models import RunStatus
from store.postgres import PostgresStore
from tests.e2e.clirun import refused, rw, started_id
from tests.helpers import snapshot


def test_start_runs_show_watch_approve(cli_env: dict[str, str], engine: Engine) -> None:
    assert "schema is already at" in rw(cli_env, "migrate").stdout
    run_id = started_id(rw(cli_env, "start", "fleet", "--payload", '{"amount": 150}').stdout)
    again = rw(cli_env, "start", "fleet", "--payload", "{}", "--id", "evt-9", "--key", "a=b")
    same = rw(cli_env, "start", "fleet", "--payload", '{"x": 1}', "--id", "evt-9")
    assert started_id(again.stdout) == started_id(same.stdout)  # idempotent on --id

    listing = rw(cli_env, "runs").stdout
    assert run_id in listing and "queued" in listing
    assert run_id in rw(cli_env, "runs", "--status", "queued", "--agent", "fleet").stdout
    assert run_id not in rw(cli_env, "runs", "--status", "completed").stdout

    waiting = engine.execute(run_id)  # up to the refund that needs approval
    assert waiting is not None and waiting.status is RunStatus.WAITING and waiting.waiting
    shown = rw(cli_env, "show", run_id).stdout
    assert "status   waiting" in shown and "approval " + waiting.waiting.approval_id in shown
    assert "tool  charge" in shown and "checkpoint at step 3" in shown

    approval_id = waiting.waiting.approval_id
    assert "not valid" in refused(cli_env, "approve", approval_id, "--token", "forged")
    out = rw(cli_env, "approve", approval_id, "--token", engine.token(approval_id)).stdout
    assert f"approved {approval_id} (refund) as " in out
    assert f"; run {run_id} is queued again" in out
    assert "already approved" in refused(
        cli_env, "approve", approval_id, "--token", engine.token(approval_id)
    )
    engine.execute(run_id)
    watched = rw(cli_env, "watch", run_id).stdout
    assert "-- completed" in watched and "output:" in watched
    assert watched.count("llm") == 5


def test_deny_cancel_tick_prune(
    cli_env: dict[str, str], engine: Engine, pg_store: PostgresStore
) -> None:
    run = engine.start("fleet", {"amount": 500})
    waiting = engine.execute(run.id)
    assert waiting is not None and waiting.waiting is not None
    approval_id = waiting.waiting.approval_id
    out = rw(
        cli_env, "deny", approval_id, "--token", engine.token(approval_id), "--reason", "no"
    ).stdout
    assert f"denied {approval_id}" in out
    assert engine.approvals(run.id)[0].reason == "no"

    queued = engine.start("fleet", {"amount": 1})
    assert (
        f"run {queued.id} cancelled by ops-ana"
        in rw(cli_env, "cancel", queued.id, "--by", "ops-ana").stdout
    )
    assert "cancelled by ops-ana" in rw(cli_env, "show", queued.id).stdout
    assert "already cancelled; nothing to cancel" in rw(cli_env, "cancel", queued.id).stdout
    assert engine.get_run(queued.id).status is RunStatus.CANCELLED

    assert re.search(r"notified \d+ .*re-enqueued \d+", rw(cli_env, "tick").stdout)
    assert "deleted 0 ended run(s)" in rw(cli_env, "prune", "--older-than", "1h").stdout
    settled_hours_ago(pg_store, queued.id, 2)
    pruned = rw(cli_env, "prune", "--older-than", "1h").stdout
    assert "deleted 1 ended run(s)" in pruned
    assert "is not a duration" in refused(cli_env, "prune", "--older-than", "soon")


def settled_hours_ago(store: PostgresStore, run_id: str, hours: int) -> None:
    """Age a settled run: prune refuses ages under a minute, and tests do not wait."""
    with store.engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE runs SET finished_at = now() - make_interval(hours => :h) WHERE id = :id"
            ),
            {"h": hours, "id": run_id},
        )


@pytest.mark.parametrize(
    "age",
    [
        "0d",
        "0s",
        "0m0s",
        "59s",
        "-5d",
        "99999999d",
        "999999999d",
        "36501d",
        "1e400d",
        "1.5d",
        "soon",
        "",
        " ",
        "5",
        "d",
        "5x",
        "9" * 5000 + "d",
        "\u0663d",
        "1d1d",
        "5 d",
    ],
)
def test_prune_refuses_absurd_ages(
    cli_env: dict[str, str], engine: Engine, pg_store: PostgresStore, age: str
) -> None:
    run = engine.start("fleet", {"amount": 1})
    engine.cancel(run.id)
    settled_hours_ago(pg_store, run.id, 24 * 365 * 200)  # older than any age prune takes
    before = snapshot(pg_store)
    line = refused(cli_env, "prune", "--older-than", age)
    assert "duration" in line or "outside 1m to 36500d" in line
    assert snapshot(pg_store) == before


def test_bad_input_is_one_clear_line(cli_env: dict[str, str]) -> None:
    assert "no agent named 'nope'" in refused(cli_env, "start", "nope")
    assert "--payload is not JSON" in refused(cli_env, "start", "fleet", "--payload", "{bad")
    assert "is not name=value" in refused(cli_env, "start", "fleet", "--key", "novalue")
    unknown = "01a22a21-0000-7000-8000-000000000000"
    assert "no run with id" in refused(cli_env, "show", unknown)
    assert "no run with id" in refused(cli_env, "show", "not-a-run")
    assert "no run with id" in refused(cli_env, "watch", unknown)
    assert "no run with id" in refused(cli_env, "cancel", unknown)
    assert "no approval or run with id" in refused(cli_env, "approve", unknown, "--token", "t")
    assert "no question or run with id" in refused(cli_env, "answer", unknown, "yes")
    assert "unknown status 'bogus'" in refused(cli_env, "runs", "--status", "bogus")
    bad_env = {**cli_env, "RUNWRIGHT_LEASE_TTL_SECONDS": "fast"}
    assert "RUNWRIGHT_LEASE_TTL_SECONDS must be a number" in refused(bad_env, "cancel", unknown)


def test_local_up_status_down(cli_env: dict[str, str], tmp_path: Path) -> None:
    env: dict[str, Any] = {
        k: v
        for k, v in cli_env.items()
        if k not in ("RUNWRIGHT_DATABASE_URL", "RUNWRIGHT_REDIS_URL", "RUNWRIGHT_BROKER_URL")
    }
    env["RUNWRIGHT_HOME"] = str(tmp_path / "stack")
    try:
        up = rw(env, "local", "up").stdout
        assert re.search(r"postgres\s+postgresql://postgres@127\.0\.0\.1:\d+/runwright", up)
        status = rw(env, "local", "status").stdout
        assert re.search(r"postgres\s+running", status) and re.search(r"redis\s+running", status)
        # With no URLs set, commands use the local stack.
        assert "no runs" in rw(env, "runs").stdout
    finally:
        assert "stopped" in rw(env, "local", "down").stdout
    status = rw(env, "local", "status").stdout
    assert re.search(r"postgres\s+stopped", status) and re.search(r"redis\s+stopped", status)
