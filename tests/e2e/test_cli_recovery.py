"""``runwright retry``, ``runwright fork``, and what ``show`` and ``runs`` say of
retries, attempts and forks, through the real entry point. The runs execute in
this process (``engine``); the commands run as subprocesses on the same
Postgres and Redis."""

from __future__ import annotations

from datetime import timedelta

import pytest

from runner import Engine
from store.models import Fence, Outcome, RetryWait, RunError, RunStatus, utcnow
from store.postgres import PostgresStore
from tests.e2e.clirun import refused, rw, started_id
from tests.e2e.test_cli_terminal import assert_inert
from tests.helpers import snapshot, try_claim

HOSTILE_ERROR = "provider said \x1b]0;pwned\x07 no"


def failed_run(engine: Engine, store: PostgresStore) -> str:
    """A run of the ``five`` agent (tests/agents.py) that failed before its first step."""
    run = engine.start("five")
    claim = try_claim(store, run.id, "worker-x", 30)
    assert claim is not None
    store.end(
        Fence(run.id, "worker-x", claim.epoch),
        Outcome(RunStatus.FAILED, error=RunError("model_error", HOSTILE_ERROR)),
    )
    return run.id


def test_retry_a_failed_run_then_show_its_attempts(
    cli_env: dict[str, str], engine: Engine, pg_store: PostgresStore
) -> None:
    run_id = failed_run(engine, pg_store)
    out = rw(cli_env, "retry", run_id, "--extra-steps", "3").stdout
    assert out == f"run {run_id} retried and queued (attempt 2, 3 more steps)\n"
    out = rw(cli_env, "retry", run_id).stdout
    assert out == f"run {run_id} is already queued; nothing to retry\n"

    shown = rw(cli_env, "show", run_id).stdout
    assert_inert(shown)
    assert "status   queued" in shown and "budget   3 steps beyond the agent's" in shown
    assert "attempts (earlier, retried)" in shown
    assert "  1  failed model_error: provider said \\x1b]0;pwned\\x07 no; after 0 steps" in shown
    assert "+3 steps" in shown

    done = engine.execute(run_id)
    assert done is not None and done.status is RunStatus.COMPLETED
    line = refused(cli_env, "retry", run_id)
    assert line == f"error: run {run_id} completed; a completed run cannot be retried"
    assert "status   completed" in rw(cli_env, "show", run_id).stdout


def test_retry_a_cancelled_run(cli_env: dict[str, str], engine: Engine) -> None:
    run = engine.start("five")
    engine.cancel(run.id)
    out = rw(cli_env, "retry", run.id).stdout
    assert out == f"run {run.id} retried and queued (attempt 2)\n"
    [attempt] = engine.attempts(run.id)
    assert attempt.status is RunStatus.CANCELLED
    assert "  1  cancelled cancelled: cancelled on request" in rw(cli_env, "show", run.id).stdout


@pytest.mark.parametrize("extra", ["-1", "abc", "1e3", "99999999999", "1000001", "", " ", "\u0663"])
def test_retry_refuses_absurd_extra_steps(
    cli_env: dict[str, str], engine: Engine, pg_store: PostgresStore, extra: str
) -> None:
    run_id = failed_run(engine, pg_store)
    before = snapshot(pg_store)
    line = refused(cli_env, "retry", run_id, "--extra-steps", extra)
    assert "--extra-steps must be a whole number from 0 to 1000000" in line
    assert snapshot(pg_store) == before


def test_show_and_runs_show_a_retry_wait(
    cli_env: dict[str, str], engine: Engine, pg_store: PostgresStore
) -> None:
    run = engine.start("five")
    claim = try_claim(pg_store, run.id, "worker-x", 30)
    assert claim is not None
    now = utcnow()
    wait = RetryWait(attempts=3, since=now, error=HOSTILE_ERROR, at=now + timedelta(minutes=2))
    pg_store.defer_retry(Fence(run.id, "worker-x", claim.epoch), wait)
    retry_at = engine.get_run(run.id).retry_at  # as the database's time zone shows it
    assert retry_at is not None

    shown = rw(cli_env, "show", run.id).stdout
    assert_inert(shown)
    assert (
        "model step: attempt 3 failed (provider said \\x1b]0;pwned\\x07 no); attempt 4 at "
        f"{retry_at:%Y-%m-%d %H:%M:%S}"
    ) in shown
    other = engine.start("five")
    rows = {line.split()[1]: line for line in rw(cli_env, "runs").stdout.splitlines()[3:-1]}
    # The same attempt by the same word wherever it is shown (show's reason too).
    assert f"queued (attempt 4 at {retry_at:%H:%M:%S})" in rows[run.id]
    assert f"attempt 4 at {retry_at:%Y-%m-%d %H:%M:%S}" in shown.split("steps")[0]
    assert "queued" in rows[other.id] and "attempt" not in rows[other.id]


def test_fork_from_the_cli(cli_env: dict[str, str], engine: Engine) -> None:
    run = engine.start("five")
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED

    out = rw(cli_env, "fork", run.id, "--at-step", "2").stdout
    assert out.endswith(f"is queued; forked from {run.id} at step 2\n")
    fork_id = started_id(out)
    shown = rw(cli_env, "show", fork_id).stdout
    assert f"forked   from run {run.id} at step 2" in shown
    assert "checkpoint at step 2 (5 messages)" in shown
    assert "budget   2 steps beyond the agent's" in shown
    forked = engine.execute(fork_id)
    assert forked is not None and forked.status is RunStatus.COMPLETED
    assert forked.output == "done"

    args = ("fork", run.id, "--at-step", "3", "--agent", "fleet", "--model", "scripted/five")
    first = rw(cli_env, *args, "--id", "fork-3").stdout
    again = rw(cli_env, *args, "--id", "fork-3").stdout
    assert first == again and started_id(first) != fork_id  # idempotent on --id
    assert "(fleet) is queued" in first
    shown = rw(cli_env, "show", started_id(first)).stdout
    assert "model    scripted/five (instead of the agent's)" in shown
    assert started_id(first) in rw(cli_env, "runs", "--agent", "fleet").stdout


def test_fork_refusals_are_one_line_and_write_nothing(
    cli_env: dict[str, str], engine: Engine, pg_store: PostgresStore
) -> None:
    run = engine.start("five")
    engine.execute(run.id)
    waiting = engine.start("fleet", {"amount": 500})
    engine.execute(waiting.id)  # waits for the refund's approval at step 3
    before = snapshot(pg_store)
    cases = [
        (("--at-step", "0"), "--at-step must be a whole number from 1 to"),
        (("--at-step", "x"), "--at-step must be a whole number from 1 to"),
        (("--at-step", "-2"), "--at-step must be a whole number from 1 to"),
        (("--at-step", "99999999999"), "--at-step must be a whole number from 1 to"),
        (("--at-step", "6"), "can be forked at steps 1 to 5, not at step 6"),
        (("--at-step", "2", "--agent", "nobody"), "no agent named 'nobody'"),
        (("--at-step", "2", "--model", ""), "the model is empty"),
    ]
    for args, says in cases:
        assert says in refused(cli_env, "fork", run.id, *args)
    assert "no result (refund)" in refused(cli_env, "fork", waiting.id, "--at-step", "3")
    unknown = "01a22a21-0000-7000-8000-000000000000"
    assert "no run with id" in refused(cli_env, "fork", unknown, "--at-step", "1")
    assert "no run with id" in refused(cli_env, "retry", unknown)
    assert "Missing option '--at-step'" in rw(cli_env, "fork", run.id, ok=False).stderr
    assert snapshot(pg_store) == before


def test_fork_refuses_to_repeat_effects_unless_rerun_effects(
    cli_env: dict[str, str], engine: Engine, pg_store: PostgresStore
) -> None:
    """Issue 23: ``runwright fork`` before effects that ran (the fleet agent's
    charge at step 2 and refund at step 3) exits 1 naming them and creates no
    run; with ``--rerun-effects`` it forks, and the fork charges again under
    its own key."""
    run = engine.start("fleet", {"amount": 10})
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED
    before = snapshot(pg_store)
    for step in ("1", "2"):
        line = refused(cli_env, "fork", run.id, "--at-step", step)
        assert line.startswith(f"error: run {run.id} ran effects after step {step}; a fork")
        assert "new idempotency keys" in line and "add --rerun-effects to fork anyway" in line
        named = "charge (step 2), refund (step 3)" if step == "1" else "refund (step 3)"
        assert line.endswith(f": {named}")
    assert snapshot(pg_store) == before  # no run created, nothing written

    out = rw(cli_env, "fork", run.id, "--at-step", "3").stdout  # no effect after step 3
    assert out.endswith(f"is queued; forked from {run.id} at step 3\n")
    out = rw(cli_env, "fork", run.id, "--at-step", "1", "--rerun-effects").stdout
    assert out.endswith(f"is queued; forked from {run.id} at step 1\n")
    fork_id = started_id(out)
    forked = engine.execute(fork_id)
    assert forked is not None and forked.status is RunStatus.COMPLETED
    [charge] = [s for s in engine.steps(fork_id) if s.name == "charge"]
    assert isinstance(charge.output, dict) and charge.output["key"].startswith(f"{fork_id}:")


def test_fork_help_says_what_a_fork_repeats(cli_env: dict[str, str]) -> None:
    shown = " ".join(rw(cli_env, "fork", "--help").stdout.split())
    assert "--rerun-effects" in shown
    assert "effects included, and runs them under new idempotency keys" in shown
    assert "downstream deduplication will not catch them" in shown
    assert "fork refuses and names those effects, unless --rerun-effects" in shown
