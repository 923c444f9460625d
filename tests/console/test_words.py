"""The console's words, as a person reads them (issue 49, item 6): the runs
list's counts read apart as text (they ran together: "queued 0running 0"); a
cost has the one format the CLI shows too (runner/core/costs.py ``money``); a run
waiting to try its model step again counts attempts as `runwright show` and
`runwright runs` do."""

from __future__ import annotations

import html
import re
from datetime import timedelta

from flask.testing import FlaskClient

from runner import Agent, Engine
from runner.core.costs import money
from runner.testing import ScriptedModel, text
from store.models import Fence, RetryWait, utcnow
from store.postgres import PostgresStore
from tests.console.conftest import BASE, execute_all, page_text, unique
from tests.helpers import try_claim


def words(page: str) -> str:
    """The page's text with its tags taken out and nothing put in their place,
    as a text browser, a copy or a screen reader gets it."""
    return html.unescape(re.sub(r"<[^>]+>", "", page))


def test_the_counts_read_apart_and_a_tiny_cost_says_so(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    name = unique("tiny")
    model = ScriptedModel(name, lambda request: text("hello"), price=(1e-6, 1e-6))
    Agent(name=name, model=model.model, tools=[])
    run = engine.start(name, {})
    execute_all(engine, queued)
    engine.start(name, {})
    cost = engine.get_run(run.id).cost_usd
    assert 0 < cost < 0.0001

    listed = words(page_text(client, f"{BASE}/?agent={name}"))
    assert "queued 1 running 0 waiting 0 completed 1 failed 0" in listed
    assert "<$0.0001" in listed and "$0.0000" in listed  # the priced run, the one not run yet
    shown = words(page_text(client, f"{BASE}/runs/{run.id}"))
    assert f"cost{money(cost)}" in shown.replace("\n", "").replace(" ", "")


def test_a_run_waiting_to_try_its_model_step_again_counts_attempts(
    client: FlaskClient, engine: Engine, pg_store: PostgresStore
) -> None:
    name = unique("again")
    Agent(name=name, model=ScriptedModel(name, [text("never")]).model)
    run = engine.start(name, {})
    claim = try_claim(pg_store, run.id, "worker-x", 30)
    assert claim is not None
    at = utcnow() + timedelta(minutes=2)
    wait = RetryWait(attempts=5, since=utcnow(), error="rate limited", at=at)
    pg_store.defer_retry(Fence(run.id, "worker-x", claim.epoch), wait)
    shown = words(page_text(client, f"{BASE}/runs/{run.id}"))
    assert "attempt 5 failed: rate limited; attempt 6 at " in shown
    assert "retries" not in shown
