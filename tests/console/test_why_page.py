"""A run's page says why the run is where it is (issue 26, item 4): a queued
run waits for a worker, a waiting one for a decision that expires."""

from __future__ import annotations

import html
import re

from flask.testing import FlaskClient

from runner import Engine, RunStatus
from tests.console.conftest import BASE, approval_agent, execute_all, page_text, waiting_run


def why(page: str) -> str:
    found = re.search(r'<p class="note" id="why">(.*?)</p>', page, re.S)
    assert found is not None, page
    return html.unescape(re.sub(r"<[^>]+>", "", found.group(1)))


def test_a_queued_run_says_it_waits_for_a_worker(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    agent = approval_agent()
    run = engine.start(agent.name, {})
    said = why(page_text(client, f"{BASE}/runs/{run.id}"))
    explained = engine.explain(engine.get_run(run.id))
    assert explained is not None and "waiting for a" in explained and "worker" in explained
    assert said == "S" + explained[1:] + ".", said


def test_a_waiting_run_names_its_approval_and_when_it_expires(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    _agent, run, approval = waiting_run(engine, queued)
    said = why(page_text(client, f"{BASE}/runs/{run.id}"))
    assert said.startswith(f"Waits for a decision on {approval.tool_name} (expires "), said


def test_a_completed_run_has_no_why(client: FlaskClient, engine: Engine, queued: list[str]) -> None:
    _agent, run, approval = waiting_run(engine, queued)
    engine.decide(approval.approval_id, True, trusted=True, by="alice")
    execute_all(engine, queued)
    assert engine.get_run(run.id).status is RunStatus.COMPLETED
    assert 'id="why"' not in page_text(client, f"{BASE}/runs/{run.id}")
