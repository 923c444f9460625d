"""`runwright runs --needs-attention`, `show` and `resolve` on a run whose
worker died after an effect ran and before its outcome was written (issue 26,
items 1 and 2): the CLI finds the run, names the effect, and records who
resolved it and what they said."""

from __future__ import annotations

from pathlib import Path

from runner.core.settings import Settings
from runner.testing import TestEngine
from tests.e2e.clirun import make_cli_env, refused, rw
from tests.integration.test_unknown_effects import Refunds, crashed_mid_refund


def test_the_cli_lists_shows_and_resolves_an_unknown_effect(
    database_url: str, redis_url: str, tmp_path: Path
) -> None:
    settings = Settings(secret_key="test:test-secret-for-runwright-tests-only")
    with TestEngine(database_url, settings=settings) as engine:
        refunds = Refunds()
        run_id = crashed_mid_refund(engine, refunds)
        done = engine.run(Refunds().agent)  # a run with nothing unknown
    env = make_cli_env(database_url, redis_url, tmp_path, settings)

    listed = rw(env, "runs", "--needs-attention").stdout
    assert run_id in listed and done.id not in listed and "needs attention" in listed
    assert done.id in rw(env, "runs").stdout

    shown = rw(env, "show", run_id).stdout
    assert "effects of unknown outcome" in shown
    assert "call call_refund" in shown and "refund(" in shown and "unresolved" in shown

    line = refused(env, "resolve", run_id, "call_nope", "done")
    assert "no effect for tool call 'call_nope'" in line
    out = rw(env, "resolve", run_id, "call_refund", "done", "--note", "in the PSP", "--by", "ana")
    assert "resolved done by ana" in out.stdout and "needs no more attention" in out.stdout
    assert run_id not in rw(env, "runs", "--needs-attention").stdout
    assert "resolved done by ana: in the PSP" in rw(env, "show", run_id).stdout
    line = refused(env, "resolve", run_id, "call_refund", "not_done")
    assert "already resolved done by ana" in line
